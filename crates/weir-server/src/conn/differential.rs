//! weir's HTTP/1 server against hyper's, byte for byte: the same listener
//! (a static site, and a proxy site in front of it) served by
//! `http1::serve` and by hyper's HTTP/1 server (a dev-dependency, the
//! reference only) must answer every case with the same bytes, `date`
//! aside. Requests that break the strict framing are not compared: weir
//! refuses them (tests beside `http1` and `weir_http::h1::framing`) where
//! hyper is lenient.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::*;
use crate::pipeline::{Listener, Registry, build_sites};

/// Which HTTP/1 server answers.
#[derive(Clone, Copy)]
enum Engine {
    Weir,
    Hyper,
}

/// Serves every connection `tcp` accepts with `engine`, for `site` of `cfg`.
fn serve(tcp: TcpListener, cfg: &weir_config::Config, site: usize, engine: Engine) {
    let sites = build_sites(
        cfg,
        &[],
        &Registry::new(1),
        &weir_cache::Store::new(&cfg.cache, 1),
    )
    .unwrap();
    let listener = Arc::new(Current::from_pointee(Listener::new(
        &sites,
        &[site],
        site,
        &cfg.server,
    )));
    let ctx = Arc::new(ConnCtx::new(
        listener,
        None,
        cfg.server.limits.clone(),
        tio::Limits::from(&cfg.server.timeouts),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(ConnCounts::new(1)),
    ));
    let drain = Drain::new();
    let local = tcp.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, peer)) = tcp.accept().await else {
                return;
            };
            let info = ConnInfo {
                peer,
                local,
                tls: false,
                tls_info: None,
                worker: Worker::default(),
            };
            match engine {
                Engine::Weir => {
                    ctx.open.fetch_add(1, Ordering::Relaxed);
                    let open = OpenGuard {
                        ctx: ctx.clone(),
                        worker: Worker::default(),
                        proto: None,
                    };
                    tokio::spawn(serve_plain(stream, info, ctx.clone(), drain.signal(), open));
                }
                Engine::Hyper => {
                    let regions = Arc::new(Regions::default());
                    let state = Arc::new(ConnState::default());
                    let svc = service(ctx.clone(), state.clone(), Some(regions.clone()), info);
                    let io =
                        TimedIo::new(ZeroCopy::new(stream, regions), state, ctx.timeouts, true);
                    let conn = hyper::server::conn::http1::Builder::new()
                        .header_read_timeout(None)
                        .serve_connection(TokioIo::new(io), svc)
                        .with_upgrades();
                    tokio::spawn(conn);
                }
            }
        }
    });
}

/// Sends `request` on a new connection and reads until the server closes
/// it (or two seconds pass).
async fn raw(addr: SocketAddr, request: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(2), s.read_to_end(&mut out)).await;
    out
}

/// The answer with every `date` line removed, and a chunked body (always
/// the last answer of a case) decoded, gunzipped when it is gzip: where
/// chunks and compressor flushes fall depends on timing.
fn normalize(b: Vec<u8>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = &b[..];
    while let Some(i) = rest.windows(8).position(|w| w == b"\r\ndate: ") {
        out.extend_from_slice(&rest[..i + 2]);
        let after = &rest[i + 2..];
        let end = after.windows(2).position(|w| w == b"\r\n").unwrap();
        rest = &after[end + 2..];
    }
    out.extend_from_slice(rest);
    let Some(i) = out
        .windows(28)
        .position(|w| w == b"transfer-encoding: chunked\r\n")
    else {
        return out;
    };
    let start = i + out[i..].windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let mut body = &out[start..];
    let mut decoded = b"(chunked)".to_vec();
    loop {
        let eol = body
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("a chunk size");
        let n = usize::from_str_radix(std::str::from_utf8(&body[..eol]).unwrap(), 16)
            .expect("a hex chunk size");
        decoded.extend_from_slice(&body[eol + 2..eol + 2 + n]);
        assert_eq!(&body[eol + 2 + n..eol + 4 + n], b"\r\n");
        body = &body[eol + 4 + n..];
        if n == 0 {
            break;
        }
    }
    assert!(body.is_empty(), "bytes after the last chunk");
    let head_start = out[..i]
        .windows(4)
        .rposition(|w| w == b"\r\n\r\n")
        .map_or(0, |p| p + 4);
    if out[head_start..start]
        .windows(24)
        .any(|w| w == b"content-encoding: gzip\r\n")
    {
        let mut plain = Vec::new();
        std::io::Read::read_to_end(
            &mut flate2::read::GzDecoder::new(&decoded[b"(chunked)".len()..]),
            &mut plain,
        )
        .expect("a valid gzip body");
        decoded.truncate(b"(chunked)".len());
        decoded.extend_from_slice(b"(gunzipped)");
        decoded.extend_from_slice(&plain);
    }
    out.truncate(start);
    out.extend_from_slice(&decoded);
    out
}

/// Static files (small, large with sendfile, ranged, conditional,
/// compressed on the fly and so chunked), errors, redirects, HTTP/1.0,
/// request bodies, OPTIONS, garbage, pipelining, and the same through the
/// proxy (streamed bodies, hop-by-hop headers).
#[tokio::test]
async fn weirs_http1_server_answers_byte_for_byte_like_hypers() {
    let www = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(www.path().join("sub")).unwrap();
    std::fs::write(
        www.path().join("index.html"),
        "<!doctype html><html><head><title>weir</title></head><body><h1>It works</h1><p>Served by weir.</p></body></html>\n",
    )
    .unwrap();
    std::fs::write(www.path().join("sub/page.txt"), "sub page\n").unwrap();
    let big: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(www.path().join("big.bin"), &big).unwrap();
    let text: String = (0..20_000)
        .map(|i| format!("line {i} of a compressible text file\n"))
        .collect();
    std::fs::write(www.path().join("text.txt"), &text).unwrap();

    let bind = || async { TcpListener::bind("127.0.0.1:0").await.unwrap() };
    let (st_weir, st_hyper, px_weir, px_hyper) =
        (bind().await, bind().await, bind().await, bind().await);
    let upstream = st_weir.local_addr().unwrap();
    let cfg = weir_config::load_str(
        "weir.toml",
        &format!(
            r#"
[site."127.0.0.1:{s}"]
root = "{root}"
file_cache = {{ max_file_size = "512KiB" }}
[site."127.0.0.1:{p}"]
proxy = {{ to = ["{upstream}"] }}
"#,
            s = upstream.port(),
            p = px_weir.local_addr().unwrap().port(),
            root = www.path().display()
        ),
        www.path(),
    )
    .unwrap();
    let listeners = [st_weir, st_hyper, px_weir, px_hyper];
    let addrs = listeners.each_ref().map(|l| l.local_addr().unwrap());
    // The config's sites are in its own order: find each by name.
    let site = |port: u16| {
        let name = format!("127.0.0.1:{port}");
        cfg.sites.iter().position(|s| s.name == name).unwrap()
    };
    let (st, px) = (site(upstream.port()), site(addrs[2].port()));
    let engines = [Engine::Weir, Engine::Hyper, Engine::Weir, Engine::Hyper];
    for ((l, engine), s) in listeners.into_iter().zip(engines).zip([st, st, px, px]) {
        serve(l, &cfg, s, engine);
    }

    let etag = {
        let r = raw(
            addrs[0],
            b"HEAD / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        )
        .await;
        let r = String::from_utf8_lossy(&r).into_owned();
        let line = r
            .lines()
            .find(|l| l.starts_with("etag: "))
            .unwrap_or_else(|| panic!("no etag in {r:?}"));
        line["etag: ".len()..].to_owned()
    };
    let cases: Vec<String> = vec![
        "GET / HTTP/1.1\r\nHost: a\r\n\r\nHEAD / HTTP/1.1\r\nHost: a\r\n\r\nGET /missing HTTP/1.1\r\nHost: a\r\n\r\nGET /sub HTTP/1.1\r\nHost: a\r\n\r\nGET /sub/ HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n".into(),
        "GET /big.bin HTTP/1.1\r\nHost: a\r\n\r\nGET /big.bin HTTP/1.1\r\nHost: a\r\nRange: bytes=10-99999\r\n\r\nHEAD /big.bin HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, close\r\n\r\n".into(),
        format!("GET / HTTP/1.1\r\nHost: a\r\nIf-None-Match: {etag}\r\n\r\nGET /text.txt HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n"),
        "GET / HTTP/1.0\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n".into(),
        "GET / HTTP/1.1\r\nHost: a\r\n\r\nPOST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabcGET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n".into(),
        "GET / HTTP/1.1\r\nHost: a\r\n\r\nOPTIONS * HTTP/1.1\r\nHost: a\r\n\r\nGET /../../etc/passwd HTTP/1.1\r\nHost: a\r\n\r\nGARBAGE\r\n\r\n".into(),
        "GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\n\r\nGET / HTTP/1.1\r\nConnection: close\r\n\r\n".into(),
        "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nx-t: 1\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n".into(),
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\nabcGET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n".into(),
        "POST / HTTP/1.0\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nhiGET /sub/page.txt HTTP/1.0\r\n\r\n".into(),
    ];
    for (ours, hypers, what) in [
        (addrs[0], addrs[1], "static"),
        (addrs[2], addrs[3], "proxy"),
    ] {
        for case in &cases {
            let (a, b) = tokio::join!(raw(ours, case.as_bytes()), raw(hypers, case.as_bytes()));
            let (a, b) = (normalize(a), normalize(b));
            assert!(!b.is_empty(), "{what}: hyper answered nothing to {case:?}");
            assert!(
                a == b,
                "{what}: answers differ for {case:?}\nweir:\n{}\nhyper:\n{}",
                String::from_utf8_lossy(&a[..a.len().min(3000)]),
                String::from_utf8_lossy(&b[..b.len().min(3000)])
            );
        }
    }
}
