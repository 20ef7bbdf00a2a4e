//! End-to-end tests of [`StaticFiles::serve`] against real files in a
//! temporary directory. Each test is named after the behaviour it pins.

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode, header};
use http_body_util::BodyExt;
use tokio::io::AsyncReadExt;

use super::*;

struct Resp {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Resp {
    fn h(&self, name: header::HeaderName) -> &str {
        self.headers
            .get(&name)
            .map(|v| v.to_str().unwrap())
            .unwrap_or("")
    }
}

async fn send(sf: &StaticFiles, method: Method, uri: &str, headers: &[(&str, &str)]) -> Resp {
    let mut b = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let parts = b.body(()).unwrap().into_parts().0;
    let rel = parts.uri.path().to_owned();
    let r = sf.serve(&parts, &rel).await;
    let (p, body) = r.into_parts();
    Resp {
        status: p.status,
        headers: p.headers,
        body: body.collect().await.unwrap().to_bytes(),
    }
}

async fn get(sf: &StaticFiles, uri: &str) -> Resp {
    send(sf, Method::GET, uri, &[]).await
}

async fn get_h(sf: &StaticFiles, uri: &str, headers: &[(&str, &str)]) -> Resp {
    send(sf, Method::GET, uri, headers).await
}

fn write(root: &Path, rel: &str, data: impl AsRef<[u8]>) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, data).unwrap();
}

fn server(root: &Path) -> Arc<StaticFiles> {
    StaticFiles::new(Options::new(root)).unwrap()
}

fn server_with(root: &Path, f: impl FnOnce(&mut Options)) -> Arc<StaticFiles> {
    let mut o = Options::new(root);
    f(&mut o);
    StaticFiles::new(o).unwrap()
}

async fn decompress(enc: &str, data: &[u8]) -> Vec<u8> {
    use async_compression::tokio::bufread::{BrotliDecoder, GzipDecoder, ZstdDecoder};
    let mut out = Vec::new();
    match enc {
        "br" => BrotliDecoder::new(data).read_to_end(&mut out).await,
        "zstd" => ZstdDecoder::new(data).read_to_end(&mut out).await,
        "gzip" => GzipDecoder::new(data).read_to_end(&mut out).await,
        other => panic!("unknown coding {other}"),
    }
    .unwrap();
    out
}

fn text(n: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(n);
    let mut i = 0u64;
    while v.len() < n {
        v.extend_from_slice(format!("line {i} of some compressible text\n").as_bytes());
        i += 1;
    }
    v.truncate(n);
    v
}

/// Parses a multipart/byteranges body into (Content-Range, bytes) parts.
fn parse_multipart(content_type: &str, body: &[u8]) -> Vec<(String, Vec<u8>)> {
    let boundary = content_type.split("boundary=").nth(1).unwrap();
    let delim = format!("--{boundary}");
    let mut parts = Vec::new();
    let mut rest = body;
    // Skip to the first delimiter.
    let find = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).position(|w| w == needle);
    let start = find(rest, delim.as_bytes()).unwrap();
    rest = &rest[start + delim.len()..];
    loop {
        if rest.starts_with(b"--") {
            break;
        }
        assert!(rest.starts_with(b"\r\n"));
        let hdr_end = find(rest, b"\r\n\r\n").unwrap();
        let headers = std::str::from_utf8(&rest[2..hdr_end]).unwrap();
        let range = headers
            .lines()
            .find_map(|l| l.strip_prefix("Content-Range: "))
            .unwrap()
            .to_owned();
        let data_start = hdr_end + 4;
        let next = find(&rest[data_start..], format!("\r\n{delim}").as_bytes()).unwrap();
        parts.push((range, rest[data_start..data_start + next].to_vec()));
        rest = &rest[data_start + next + 2 + delim.len()..];
    }
    parts
}

// ---------------------------------------------------------------- basics

#[tokio::test]
async fn content_types_carry_charset_for_text_and_octet_stream_when_unknown() {
    let d = tempfile::tempdir().unwrap();
    for (name, _) in CASES {
        write(d.path(), name, b"x");
    }
    let sf = server(d.path());
    for (name, ct) in CASES {
        let r = get(&sf, &format!("/{name}")).await;
        assert_eq!(r.status, StatusCode::OK, "{name}");
        assert!(
            r.h(header::CONTENT_TYPE).ends_with(ct),
            "{name}: {}",
            r.h(header::CONTENT_TYPE)
        );
    }
}

const CASES: [(&str, &str); 8] = [
    ("a.html", "text/html; charset=utf-8"),
    ("a.css", "text/css; charset=utf-8"),
    ("a.js", "javascript; charset=utf-8"),
    ("a.json", "application/json; charset=utf-8"),
    ("a.svg", "image/svg+xml; charset=utf-8"),
    ("a.txt", "text/plain; charset=utf-8"),
    ("a.png", "image/png"),
    ("a.weirdext", "application/octet-stream"),
];

#[tokio::test]
async fn get_sets_length_last_modified_strong_etag_and_accept_ranges() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "f.txt", b"hello world");
    let sf = server(d.path());
    let r = get(&sf, "/f.txt").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(&r.body[..], b"hello world");
    assert_eq!(r.h(header::CONTENT_LENGTH), "11");
    assert!(httpdate::parse_http_date(r.h(header::LAST_MODIFIED)).is_ok());
    let etag = r.h(header::ETAG);
    assert!(etag.starts_with('"') && etag.ends_with('"') && !etag.starts_with("W/"));
    assert_eq!(r.h(header::ACCEPT_RANGES), "bytes");
    // Served again from the cache: identical headers and body.
    assert_eq!(sf.cached_entries(), 1);
    let r2 = get(&sf, "/f.txt").await;
    assert_eq!(r2.body, r.body);
    assert_eq!(r2.h(header::ETAG), etag);
}

#[tokio::test]
async fn head_has_get_headers_and_no_body() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "f.txt", b"hello world");
    write(d.path(), "big.bin", vec![7u8; 2 << 20]);
    let sf = server(d.path());
    for p in ["/f.txt", "/big.bin"] {
        let g = get(&sf, p).await;
        let h = send(&sf, Method::HEAD, p, &[]).await;
        assert_eq!(h.status, StatusCode::OK);
        assert!(h.body.is_empty());
        for name in [
            header::CONTENT_LENGTH,
            header::CONTENT_TYPE,
            header::ETAG,
            header::LAST_MODIFIED,
        ] {
            assert_eq!(h.h(name.clone()), g.h(name.clone()), "{p} {name}");
        }
    }
}

#[tokio::test]
async fn other_methods_get_405_with_allow_and_options_204() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "f.txt", b"x");
    let sf = server(d.path());
    for m in [Method::POST, Method::PUT, Method::DELETE, Method::PATCH] {
        let r = send(&sf, m, "/f.txt", &[]).await;
        assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(r.h(header::ALLOW), "GET, HEAD");
    }
    let r = send(&sf, Method::OPTIONS, "/f.txt", &[]).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert_eq!(r.h(header::ALLOW), "GET, HEAD");
}

#[tokio::test]
async fn missing_file_is_404_with_plain_text_body() {
    let d = tempfile::tempdir().unwrap();
    let sf = server(d.path());
    let r = get(&sf, "/nope.txt").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(&r.body[..], b"404 Not Found\n");
    assert_eq!(r.h(header::CONTENT_TYPE), "text/plain; charset=utf-8");
}

#[tokio::test]
async fn file_with_trailing_slash_is_404() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "f.txt", b"x");
    let sf = server(d.path());
    assert_eq!(get(&sf, "/f.txt/").await.status, StatusCode::NOT_FOUND);
}

// ---------------------------------------------------------- conditionals

#[tokio::test]
async fn not_modified_via_if_none_match_lists_weak_and_star() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "f.txt", b"hello");
    let sf = server(d.path());
    let etag = get(&sf, "/f.txt").await.h(header::ETAG).to_owned();
    for inm in [
        etag.clone(),
        format!("\"zzz\", {etag}"),
        format!("W/{etag}"),
        "*".to_owned(),
    ] {
        let r = get_h(&sf, "/f.txt", &[("if-none-match", &inm)]).await;
        assert_eq!(r.status, StatusCode::NOT_MODIFIED, "{inm}");
        assert!(r.body.is_empty());
        assert_eq!(r.h(header::ETAG), etag);
        assert!(!r.h(header::LAST_MODIFIED).is_empty());
    }
    let r = get_h(&sf, "/f.txt", &[("if-none-match", "\"other\"")]).await;
    assert_eq!(r.status, StatusCode::OK);
}

#[tokio::test]
async fn not_modified_via_if_modified_since_and_none_match_wins() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "f.txt", b"hello");
    let sf = server(d.path());
    let lm = get(&sf, "/f.txt").await.h(header::LAST_MODIFIED).to_owned();
    let r = get_h(&sf, "/f.txt", &[("if-modified-since", &lm)]).await;
    assert_eq!(r.status, StatusCode::NOT_MODIFIED);
    let r = get_h(
        &sf,
        "/f.txt",
        &[("if-modified-since", "Thu, 01 Jan 1970 00:00:00 GMT")],
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let r = get_h(
        &sf,
        "/f.txt",
        &[("if-none-match", "\"other\""), ("if-modified-since", &lm)],
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
}

#[tokio::test]
async fn precondition_failed_via_if_match_and_if_unmodified_since() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "f.txt", b"hello");
    let sf = server(d.path());
    let etag = get(&sf, "/f.txt").await.h(header::ETAG).to_owned();
    let r = get_h(&sf, "/f.txt", &[("if-match", "\"nope\"")]).await;
    assert_eq!(r.status, StatusCode::PRECONDITION_FAILED);
    assert_eq!(
        get_h(&sf, "/f.txt", &[("if-match", &etag)]).await.status,
        StatusCode::OK
    );
    assert_eq!(
        get_h(&sf, "/f.txt", &[("if-match", "*")]).await.status,
        StatusCode::OK
    );
    let r = get_h(
        &sf,
        "/f.txt",
        &[("if-unmodified-since", "Thu, 01 Jan 1970 00:00:00 GMT")],
    )
    .await;
    assert_eq!(r.status, StatusCode::PRECONDITION_FAILED);
    let r = get_h(
        &sf,
        "/f.txt",
        &[("if-unmodified-since", "Fri, 01 Jan 2100 00:00:00 GMT")],
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
}

// ---------------------------------------------------------------- ranges

#[tokio::test]
async fn single_ranges_give_206_with_content_range() {
    let d = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
    write(d.path(), "f.bin", &data);
    write(d.path(), "big.bin", vec![1u8; 3 << 20]);
    let sf = server(d.path());
    for (range, start, end) in [
        ("bytes=0-9", 0, 9),
        ("bytes=-500", 500, 999),
        ("bytes=500-", 500, 999),
        ("bytes=990-5000", 990, 999),
    ] {
        let r = get_h(&sf, "/f.bin", &[("range", range)]).await;
        assert_eq!(r.status, StatusCode::PARTIAL_CONTENT, "{range}");
        assert_eq!(
            r.h(header::CONTENT_RANGE),
            format!("bytes {start}-{end}/1000")
        );
        assert_eq!(r.h(header::CONTENT_LENGTH), (end - start + 1).to_string());
        assert_eq!(&r.body[..], &data[start..=end]);
    }
    // Same from a streamed (uncached) file.
    let r = get_h(&sf, "/big.bin", &[("range", "bytes=1048570-1048580")]).await;
    assert_eq!(r.status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(
        r.h(header::CONTENT_RANGE),
        format!("bytes 1048570-1048580/{}", 3 << 20)
    );
    assert_eq!(r.body.len(), 11);
}

#[tokio::test]
async fn multiple_ranges_give_multipart_byteranges() {
    let d = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
    write(d.path(), "f.txt", &data);
    let big: Vec<u8> = (0..=250u8).cycle().take(2 << 20).collect();
    write(d.path(), "big.bin", &big);
    let sf = server(d.path());
    for (path, src) in [("/f.txt", &data), ("/big.bin", &big)] {
        let len = src.len();
        let r = get_h(&sf, path, &[("range", "bytes=0-4, 10-19, -3")]).await;
        assert_eq!(r.status, StatusCode::PARTIAL_CONTENT);
        let ct = r.h(header::CONTENT_TYPE).to_owned();
        assert!(ct.starts_with("multipart/byteranges; boundary="), "{ct}");
        assert_eq!(r.h(header::CONTENT_LENGTH), r.body.len().to_string());
        let parts = parse_multipart(&ct, &r.body);
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[0], (format!("bytes 0-4/{len}"), src[0..5].to_vec()));
        assert_eq!(
            parts[1],
            (format!("bytes 10-19/{len}"), src[10..20].to_vec())
        );
        assert_eq!(
            parts[2],
            (
                format!("bytes {}-{}/{len}", len - 3, len - 1),
                src[len - 3..].to_vec()
            )
        );
    }
}

#[tokio::test]
async fn unsatisfiable_range_gives_416_with_star_content_range() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "f.txt", vec![b'a'; 100]);
    let sf = server(d.path());
    let r = get_h(&sf, "/f.txt", &[("range", "bytes=100-200")]).await;
    assert_eq!(r.status, StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(r.h(header::CONTENT_RANGE), "bytes */100");
}

#[tokio::test]
async fn invalid_or_abusive_range_is_ignored_with_200() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "f.txt", vec![b'a'; 100]);
    let sf = server(d.path());
    let many = format!("bytes={}", vec!["0-0"; 200].join(","));
    let overlap = format!("bytes={}", ["0-99"; 5].join(","));
    for range in [
        "bytes=9-1",
        "bytes=x-y",
        "lines=1-2",
        many.as_str(),
        overlap.as_str(),
    ] {
        let r = get_h(&sf, "/f.txt", &[("range", range)]).await;
        assert_eq!(r.status, StatusCode::OK, "{range}");
        assert_eq!(r.body.len(), 100);
    }
}

#[tokio::test]
async fn if_range_honours_range_only_when_validator_matches() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "f.txt", b"0123456789");
    let sf = server(d.path());
    let r0 = get(&sf, "/f.txt").await;
    let (etag, lm) = (
        r0.h(header::ETAG).to_owned(),
        r0.h(header::LAST_MODIFIED).to_owned(),
    );
    let r = get_h(
        &sf,
        "/f.txt",
        &[("range", "bytes=2-3"), ("if-range", &etag)],
    )
    .await;
    assert_eq!(
        (r.status, &r.body[..]),
        (StatusCode::PARTIAL_CONTENT, &b"23"[..])
    );
    let r = get_h(&sf, "/f.txt", &[("range", "bytes=2-3"), ("if-range", &lm)]).await;
    assert_eq!(r.status, StatusCode::PARTIAL_CONTENT);
    let r = get_h(
        &sf,
        "/f.txt",
        &[("range", "bytes=2-3"), ("if-range", "\"stale\"")],
    )
    .await;
    assert_eq!(
        (r.status, &r.body[..]),
        (StatusCode::OK, &b"0123456789"[..])
    );
    let r = get_h(
        &sf,
        "/f.txt",
        &[
            ("range", "bytes=2-3"),
            ("if-range", "Thu, 01 Jan 1970 00:00:00 GMT"),
        ],
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
}

// ----------------------------------------------------------- directories

#[tokio::test]
async fn directory_serves_first_existing_index_file() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "index.html", b"root index");
    write(d.path(), "sub/index.htm", b"htm");
    write(d.path(), "sub/default.html", b"default");
    let sf = server_with(d.path(), |o| {
        o.index = vec![
            "index.html".into(),
            "index.htm".into(),
            "default.html".into(),
        ]
    });
    let r = get(&sf, "/").await;
    assert_eq!(
        (r.status, &r.body[..]),
        (StatusCode::OK, &b"root index"[..])
    );
    assert_eq!(r.h(header::CONTENT_TYPE), "text/html; charset=utf-8");
    assert_eq!(&get(&sf, "/sub/").await.body[..], b"htm");
}

#[tokio::test]
async fn directory_without_slash_redirects_keeping_query() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "sub/index.html", b"x");
    let sf = server(d.path());
    let r = get(&sf, "/sub?a=1&b=2").await;
    assert_eq!(r.status, StatusCode::PERMANENT_REDIRECT);
    assert_eq!(r.h(header::LOCATION), "/sub/?a=1&b=2");
    // Never a protocol-relative (open) redirect.
    let r = get(&sf, "//sub").await;
    assert_eq!(r.h(header::LOCATION), "/sub/");
}

#[tokio::test]
async fn directory_without_index_is_403_when_browse_off() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "sub/a.txt", b"x");
    let sf = server(d.path());
    let r = get(&sf, "/sub/").await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(&r.body[..], b"403 Forbidden\n");
}

#[tokio::test]
async fn listing_html_escapes_names_encodes_links_and_hides_dotfiles() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "sub/<b>&x y.txt", b"12345");
    write(d.path(), "sub/.secret", b"x");
    write(d.path(), "sub/inner/z", b"x");
    let sf = server_with(d.path(), |o| o.browse = true);
    let r = get(&sf, "/sub/").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.h(header::CONTENT_TYPE), "text/html; charset=utf-8");
    let html = std::str::from_utf8(&r.body).unwrap();
    assert!(html.contains("&lt;b&gt;&amp;x y.txt"), "{html}");
    assert!(html.contains("href=\"./%3Cb%3E%26x%20y.txt\""), "{html}");
    assert!(html.contains("href=\"./inner/\""), "{html}");
    assert!(!html.contains("secret"));
    assert!(!html.contains("<b>"));
}

#[tokio::test]
async fn listing_json_when_accept_prefers_it() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "sub/a.txt", b"12345");
    write(d.path(), "sub/inner/z", b"x");
    write(d.path(), "sub/.hidden", b"x");
    let sf = server_with(d.path(), |o| o.browse = true);
    let r = get_h(&sf, "/sub/", &[("accept", "application/json")]).await;
    assert_eq!(r.h(header::CONTENT_TYPE), "application/json; charset=utf-8");
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    let arr = v.as_array().unwrap();
    assert_eq!(arr.len(), 2);
    assert_eq!(arr[0]["name"], "inner");
    assert_eq!(arr[0]["is_dir"], true);
    assert_eq!(arr[1]["name"], "a.txt");
    assert_eq!(arr[1]["size"], 5);
    assert!(arr[1]["modified"].as_str().unwrap().ends_with('Z'));
    // Hidden entries listed only with serve_hidden.
    let sf = server_with(d.path(), |o| {
        o.browse = true;
        o.serve_hidden = true;
    });
    let r = get_h(&sf, "/sub/", &[("accept", "application/json")]).await;
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 3);
}

// ----------------------------------------------------------- compression

#[tokio::test]
async fn sidecars_chosen_by_accept_encoding_qvalues_with_vary() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "app.js", b"original");
    write(d.path(), "app.js.br", b"BROTLI");
    write(d.path(), "app.js.gz", b"GZIP!");
    let sf = server_with(d.path(), |o| {
        o.precompressed = vec![Encoding::Br, Encoding::Zstd, Encoding::Gzip]
    });
    let plain = get(&sf, "/app.js").await;
    assert_eq!(&plain.body[..], b"original");
    assert_eq!(plain.h(header::VARY), "accept-encoding");
    let cases = [
        ("gzip, br", "br", &b"BROTLI"[..]),
        ("gzip, br;q=0.5", "gzip", b"GZIP!"),
        ("br;q=0, gzip", "gzip", b"GZIP!"),
        ("*", "br", b"BROTLI"),
        ("zstd", "", b"original"),
        ("br;q=0, gzip;q=0", "", b"original"),
    ];
    for (ae, enc, body) in cases {
        let r = get_h(&sf, "/app.js", &[("accept-encoding", ae)]).await;
        assert_eq!(r.status, StatusCode::OK, "{ae}");
        assert_eq!(r.h(header::CONTENT_ENCODING), enc, "{ae}");
        assert_eq!(&r.body[..], body, "{ae}");
        assert_eq!(r.h(header::CONTENT_LENGTH), body.len().to_string());
        assert!(r.h(header::CONTENT_TYPE).contains("javascript"), "{ae}");
        assert_eq!(r.h(header::VARY), "accept-encoding");
        if !enc.is_empty() {
            assert_ne!(r.h(header::ETAG), plain.h(header::ETAG));
        }
    }
    // The sidecar's ETag validates the sidecar.
    let br = get_h(&sf, "/app.js", &[("accept-encoding", "br")]).await;
    let r = get_h(
        &sf,
        "/app.js",
        &[
            ("accept-encoding", "br"),
            ("if-none-match", br.h(header::ETAG)),
        ],
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_MODIFIED);
    assert_eq!(r.h(header::VARY), "accept-encoding");
}

#[tokio::test]
async fn on_the_fly_compression_of_cached_file_roundtrips() {
    let d = tempfile::tempdir().unwrap();
    let data = text(50_000);
    write(d.path(), "page.html", &data);
    let sf = server(d.path());
    let plain = get(&sf, "/page.html").await;
    for enc in ["br", "zstd", "gzip"] {
        for _ in 0..2 {
            let r = get_h(&sf, "/page.html", &[("accept-encoding", enc)]).await;
            assert_eq!(r.h(header::CONTENT_ENCODING), enc);
            assert_eq!(r.h(header::VARY), "accept-encoding");
            assert_eq!(r.h(header::CONTENT_LENGTH), r.body.len().to_string());
            assert!(r.body.len() < data.len() / 3);
            assert_ne!(r.h(header::ETAG), plain.h(header::ETAG));
            assert_eq!(decompress(enc, &r.body).await, data);
        }
    }
    // Ranges are served from the identity even when compression is accepted.
    let r = get_h(
        &sf,
        "/page.html",
        &[("accept-encoding", "br"), ("range", "bytes=0-3")],
    )
    .await;
    assert_eq!(r.status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(r.h(header::CONTENT_ENCODING), "");
    assert_eq!(&r.body[..], &data[..4]);
}

#[tokio::test]
async fn on_the_fly_compression_respects_min_size_and_types() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "small.txt", text(500));
    write(d.path(), "image.png", vec![0u8; 50_000]);
    let sf = server(d.path());
    for p in ["/small.txt", "/image.png"] {
        let r = get_h(&sf, p, &[("accept-encoding", "br, gzip")]).await;
        assert_eq!(r.h(header::CONTENT_ENCODING), "", "{p}");
        assert_eq!(r.h(header::VARY), "", "{p}");
    }
    let sf = server_with(d.path(), |o| o.compress.enabled = false);
    let d2 = text(5000);
    write(d.path(), "big.txt", &d2);
    let r = get_h(&sf, "/big.txt", &[("accept-encoding", "br")]).await;
    assert_eq!(r.h(header::CONTENT_ENCODING), "");
}

#[tokio::test]
async fn large_file_is_stream_compressed_without_length() {
    let d = tempfile::tempdir().unwrap();
    let data = text(3 << 20);
    write(d.path(), "big.txt", &data);
    let sf = server(d.path());
    for enc in ["br", "zstd", "gzip"] {
        let r = get_h(&sf, "/big.txt", &[("accept-encoding", enc)]).await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.h(header::CONTENT_ENCODING), enc);
        assert_eq!(r.h(header::CONTENT_LENGTH), "");
        assert_eq!(r.h(header::VARY), "accept-encoding");
        assert_eq!(decompress(enc, &r.body).await, data);
    }
}

// ------------------------------------------------------ streaming, cache

#[tokio::test]
async fn large_file_is_streamed_in_chunks_with_exact_bytes() {
    let d = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..5 << 20)
        .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    write(d.path(), "big.bin", &data);
    let sf = server(d.path());
    let mut b = Request::builder()
        .uri("/big.bin")
        .body(())
        .unwrap()
        .into_parts()
        .0;
    b.method = Method::GET;
    let resp = sf.serve(&b, "/big.bin").await;
    assert_eq!(
        resp.headers()[header::CONTENT_LENGTH],
        (5u32 << 20).to_string().as_str()
    );
    let mut body = resp.into_body();
    let mut got = Vec::new();
    let mut frames = 0;
    while let Some(f) = body.frame().await {
        let chunk = f.unwrap().into_data().unwrap();
        assert!(chunk.len() <= resolve::CHUNK);
        got.extend_from_slice(&chunk);
        frames += 1;
    }
    assert!(frames >= 5 << 20 >> 17);
    assert!(got == data);
    assert_eq!(sf.cached_entries(), 0);
}

#[tokio::test]
async fn cache_is_invalidated_when_file_is_rewritten() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "f.txt", b"version one");
    write(d.path(), "dir/index.html", b"index one");
    let sf = server(d.path());
    let r1 = get(&sf, "/f.txt").await;
    let i1 = get(&sf, "/dir/").await;
    assert_eq!(sf.cached_entries(), 2);
    std::fs::write(d.path().join("f.txt"), b"version two, longer").unwrap();
    std::fs::write(d.path().join("dir/index.html"), b"index two").unwrap();
    let mut ok = false;
    for _ in 0..40 {
        let r2 = get(&sf, "/f.txt").await;
        let i2 = get(&sf, "/dir/").await;
        if &r2.body[..] == b"version two, longer" && &i2.body[..] == b"index two" {
            assert_ne!(r2.h(header::ETAG), r1.h(header::ETAG));
            assert_ne!(i2.h(header::ETAG), i1.h(header::ETAG));
            assert_eq!(r2.h(header::CONTENT_LENGTH), "19");
            ok = true;
            break;
        }
        // Never a mix: the old body always comes with the old ETag.
        if &r2.body[..] == b"version one" {
            assert_eq!(r2.h(header::ETAG), r1.h(header::ETAG));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ok, "change not noticed (watching={})", sf.is_watching());
}

#[tokio::test]
async fn cache_notices_new_earlier_index_and_deleted_file() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "dir/index.htm", b"htm");
    write(d.path(), "gone.txt", b"here");
    let sf = server_with(d.path(), |o| {
        o.index = vec!["index.html".into(), "index.htm".into()]
    });
    assert_eq!(&get(&sf, "/dir/").await.body[..], b"htm");
    assert_eq!(get(&sf, "/gone.txt").await.status, StatusCode::OK);
    write(d.path(), "dir/index.html", b"html");
    std::fs::remove_file(d.path().join("gone.txt")).unwrap();
    let mut ok = false;
    for _ in 0..40 {
        if &get(&sf, "/dir/").await.body[..] == b"html"
            && get(&sf, "/gone.txt").await.status == StatusCode::NOT_FOUND
        {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ok);
}

#[tokio::test]
async fn symlinked_entry_is_revalidated_by_stat() {
    // inotify on the root does not see a target outside it: the entry is
    // re-checked by stat at most once per second.
    let d = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    write(outside.path(), "t.txt", b"first");
    std::os::unix::fs::symlink(outside.path().join("t.txt"), d.path().join("link.txt")).unwrap();
    let sf = server_with(d.path(), |o| o.follow_symlinks = true);
    assert_eq!(&get(&sf, "/link.txt").await.body[..], b"first");
    std::fs::write(outside.path().join("t.txt"), b"second!").unwrap();
    let mut ok = false;
    for _ in 0..50 {
        if &get(&sf, "/link.txt").await.body[..] == b"second!" {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ok);
}

// ---------------------------------------------------------------- attacks

async fn assert_refused(sf: &StaticFiles, uri: &str) {
    let r = get(sf, uri).await;
    assert!(
        matches!(
            r.status,
            StatusCode::BAD_REQUEST | StatusCode::FORBIDDEN | StatusCode::NOT_FOUND
        ),
        "{uri}: {}",
        r.status
    );
    assert!(!r.body.windows(6).any(|w| w == b"SECRET"), "{uri} leaked");
}

fn attack_tree() -> (tempfile::TempDir, tempfile::TempDir) {
    let base = tempfile::tempdir().unwrap();
    write(base.path(), "secret.txt", b"SECRET");
    write(base.path(), "www/index.html", b"ok");
    write(base.path(), "www/sub/a.txt", b"a");
    let outside = tempfile::tempdir().unwrap();
    write(outside.path(), "s.txt", b"SECRET outside");
    (base, outside)
}

#[tokio::test]
async fn dotdot_traversal_is_refused() {
    let (base, _o) = attack_tree();
    let sf = server(&base.path().join("www"));
    assert_refused(&sf, "/../secret.txt").await;
    assert_refused(&sf, "/sub/../../secret.txt").await;
    assert_eq!(get(&sf, "/sub/../index.html").await.status, StatusCode::OK);
}

#[tokio::test]
async fn encoded_dotdot_traversal_is_refused() {
    let (base, _o) = attack_tree();
    let sf = server(&base.path().join("www"));
    assert_refused(&sf, "/%2e%2e/secret.txt").await;
    assert_refused(&sf, "/%2E%2e/secret.txt").await;
    assert_refused(&sf, "/sub/%2e%2e/%2E%2e/secret.txt").await;
}

#[tokio::test]
async fn encoded_slash_is_refused() {
    let (base, _o) = attack_tree();
    let sf = server(&base.path().join("www"));
    assert_eq!(
        get(&sf, "/..%2fsecret.txt").await.status,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        get(&sf, "/sub%2fa.txt").await.status,
        StatusCode::BAD_REQUEST
    );
    assert_refused(&sf, "/%2e%2e%2fsecret.txt").await;
}

#[tokio::test]
async fn backslash_raw_and_encoded_is_refused() {
    let (base, _o) = attack_tree();
    let sf = server(&base.path().join("www"));
    let parts = Request::builder()
        .uri("/x")
        .body(())
        .unwrap()
        .into_parts()
        .0;
    // A raw backslash can't be in a parsed URI; the router could still pass one.
    let r = sf.serve(&parts, "/..\\secret.txt").await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        get(&sf, "/..%5csecret.txt").await.status,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        get(&sf, "/sub%5Ca.txt").await.status,
        StatusCode::BAD_REQUEST
    );
}

#[tokio::test]
async fn nul_byte_is_refused() {
    let (base, _o) = attack_tree();
    let sf = server(&base.path().join("www"));
    assert_eq!(
        get(&sf, "/index.html%00.txt").await.status,
        StatusCode::BAD_REQUEST
    );
    let parts = Request::builder()
        .uri("/x")
        .body(())
        .unwrap()
        .into_parts()
        .0;
    assert_eq!(
        sf.serve(&parts, "/index.html\0").await.status(),
        StatusCode::BAD_REQUEST
    );
}

#[tokio::test]
async fn overlong_utf8_dots_are_refused() {
    let (base, _o) = attack_tree();
    let sf = server(&base.path().join("www"));
    assert_eq!(
        get(&sf, "/%c0%ae%c0%ae/secret.txt").await.status,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        get(&sf, "/%c0%ae%c0%ae%c0%afsecret.txt").await.status,
        StatusCode::BAD_REQUEST
    );
}

#[tokio::test]
async fn symlink_outside_root_refused_unless_follow_symlinks() {
    let (base, outside) = attack_tree();
    let www = base.path().join("www");
    std::os::unix::fs::symlink(outside.path(), www.join("out")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("s.txt"), www.join("s.txt")).unwrap();
    std::os::unix::fs::symlink("/etc", www.join("etc")).unwrap();
    let sf = server(&www);
    assert_refused(&sf, "/out/s.txt").await;
    assert_refused(&sf, "/s.txt").await;
    let r = get(&sf, "/etc/passwd").await;
    assert!(matches!(
        r.status,
        StatusCode::NOT_FOUND | StatusCode::FORBIDDEN
    ));
    let sf = server_with(&www, |o| o.follow_symlinks = true);
    assert_eq!(&get(&sf, "/out/s.txt").await.body[..], b"SECRET outside");
    assert_eq!(&get(&sf, "/s.txt").await.body[..], b"SECRET outside");
    let r = get(&sf, "/etc/passwd").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body, Bytes::from(std::fs::read("/etc/passwd").unwrap()));
}

#[tokio::test]
async fn symlink_inside_root_is_served() {
    let (base, _o) = attack_tree();
    let www = base.path().join("www");
    std::os::unix::fs::symlink(www.join("sub/a.txt"), www.join("alias.txt")).unwrap();
    std::os::unix::fs::symlink("sub", www.join("subalias")).unwrap();
    let sf = server(&www);
    assert_eq!(&get(&sf, "/alias.txt").await.body[..], b"a");
    assert_eq!(&get(&sf, "/subalias/a.txt").await.body[..], b"a");
}

#[tokio::test]
async fn hidden_files_are_404_unless_serve_hidden() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), ".git/config", b"[core]");
    write(d.path(), ".env", b"PASSWORD=x");
    write(d.path(), ".well-known/acme-challenge/tok", b"acme");
    std::os::unix::fs::symlink(d.path().join(".env"), d.path().join("env.txt")).unwrap();
    let sf = server(d.path());
    for p in [
        "/.git/config",
        "/.env",
        "/%2egit/config",
        "/sub/../.env",
        "/env.txt",
        "/.git/",
    ] {
        assert_eq!(get(&sf, p).await.status, StatusCode::NOT_FOUND, "{p}");
    }
    assert_eq!(
        &get(&sf, "/.well-known/acme-challenge/tok").await.body[..],
        b"acme"
    );
    let sf = server_with(d.path(), |o| o.serve_hidden = true);
    assert_eq!(&get(&sf, "/.git/config").await.body[..], b"[core]");
    assert_eq!(&get(&sf, "/.env").await.body[..], b"PASSWORD=x");
}

#[tokio::test]
async fn special_files_are_not_opened() {
    let d = tempfile::tempdir().unwrap();
    let fifo = d.path().join("pipe");
    let ok = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        let sf = server(d.path());
        assert_eq!(get(&sf, "/pipe").await.status, StatusCode::FORBIDDEN);
    }
}

#[tokio::test]
async fn index_names_with_separators_are_rejected_at_startup() {
    let d = tempfile::tempdir().unwrap();
    for bad in ["../x.html", "a/index.html", "..", ""] {
        let mut o = Options::new(d.path());
        o.index = vec![bad.to_owned()];
        assert!(
            matches!(StaticFiles::new(o), Err(Error::BadIndex(_))),
            "{bad:?}"
        );
    }
}

#[tokio::test]
async fn replaced_root_directory_is_not_served_stale() {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("www");
    write(&root, "f.txt", b"old root");
    let sf = server(&root);
    assert_eq!(&get(&sf, "/f.txt").await.body[..], b"old root");
    std::fs::rename(&root, base.path().join("www.old")).unwrap();
    write(&root, "f.txt", b"new root");
    let mut ok = false;
    for _ in 0..40 {
        if &get(&sf, "/f.txt").await.body[..] == b"new root" {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ok);
}

#[tokio::test]
async fn stream_errors_when_file_changes_under_it() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("f.bin");
    std::fs::write(&p, vec![1u8; 300_000]).unwrap();
    let f = std::fs::File::open(&p).unwrap();
    let fp = cache::Fingerprint::of(&f.metadata().unwrap());
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(&p, vec![2u8; 300_000]).unwrap();
    let s = resolve::file_body(
        f,
        fp,
        vec![resolve::Segment::File {
            start: 0,
            len: 300_000,
        }],
    );
    let res: Result<Vec<Bytes>, _> = futures_util::TryStreamExt::try_collect(s).await;
    assert!(res.is_err());
}

#[tokio::test]
async fn missing_sidecar_coding_falls_back_to_on_the_fly_compression() {
    let d = tempfile::tempdir().unwrap();
    let data = text(20_000);
    write(d.path(), "a.css", &data);
    write(d.path(), "a.css.gz", b"GZ sidecar");
    let sf = server_with(d.path(), |o| o.precompressed = vec![Encoding::Gzip]);
    let r = get_h(&sf, "/a.css", &[("accept-encoding", "gzip;q=0.5, br")]).await;
    assert_eq!(r.h(header::CONTENT_ENCODING), "gzip");
    assert_eq!(&r.body[..], b"GZ sidecar");
    let r = get_h(&sf, "/a.css", &[("accept-encoding", "br")]).await;
    assert_eq!(r.h(header::CONTENT_ENCODING), "br");
    assert_eq!(decompress("br", &r.body).await, data);
}

#[tokio::test]
async fn empty_rel_path_redirects_prefix_to_slash_once() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "index.html", b"home");
    let sf = server(d.path());
    let p = Request::builder()
        .uri("/docs?x=1")
        .body(())
        .unwrap()
        .into_parts()
        .0;
    let r = sf.serve(&p, "").await;
    assert_eq!(r.status(), StatusCode::PERMANENT_REDIRECT);
    assert_eq!(r.headers()[header::LOCATION], "/docs/?x=1");
    let p = Request::builder()
        .uri("/docs/")
        .body(())
        .unwrap()
        .into_parts()
        .0;
    let r = sf.serve(&p, "").await;
    assert_eq!(r.status(), StatusCode::OK);
}
