//! HTTP/2 over h2c with prior knowledge behaves exactly as HTTP/2 over TLS:
//! the same frames answer the same input, well-formed or not. Each case
//! sends the same bytes after the connection preface to a plain listener
//! and to a TLS one (ALPN `h2`) serving the same files, and compares the
//! frames that come back: type, flags, stream, and the payload where it
//! does not carry the time (SETTINGS, GOAWAY, RST_STREAM, PING,
//! WINDOW_UPDATE, DATA).

use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use weir_test_support::certs::make_cert;
use weir_test_support::ports::free_port;
use weir_test_support::process::Weir;

use crate::WEIR;

const MAGIC: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const WINDOW_UPDATE: u8 = 0x8;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A GET of `/` as one HEADERS frame (END_STREAM | END_HEADERS): the
/// method, path and scheme from HPACK's static table, the authority as a
/// literal.
fn get(stream: u32, scheme_https: bool, authority: &str) -> Vec<u8> {
    let mut block = vec![0x82, 0x84, if scheme_https { 0x87 } else { 0x86 }];
    block.push(0x01); // literal without indexing, name :authority
    block.push(authority.len() as u8);
    block.extend_from_slice(authority.as_bytes());
    frame(HEADERS, 0x5, stream, &block)
}

/// One frame as received, in words; payloads that carry the time (HEADERS,
/// with its `date`) are left out.
fn describe(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> String {
    match kind {
        HEADERS => format!(
            "HEADERS flags={flags:#x} stream={stream} first={:?}",
            payload.first()
        ),
        _ => format!("type={kind:#x} flags={flags:#x} stream={stream} payload={payload:02x?}"),
    }
}

/// Sends the preface and `input`, then reads frames until the server
/// closes or stays quiet for a moment.
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, input: &[u8]) -> Vec<String> {
    s.write_all(input).await.unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16384];
    loop {
        match tokio::time::timeout(Duration::from_millis(500), s.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let mut frames = Vec::new();
    let mut at = 0;
    while buf.len() >= at + 9 {
        let len = (usize::from(buf[at]) << 16)
            | (usize::from(buf[at + 1]) << 8)
            | usize::from(buf[at + 2]);
        if buf.len() < at + 9 + len {
            frames.push(format!("truncated frame of {len} bytes"));
            break;
        }
        let stream = u32::from_be_bytes(buf[at + 5..at + 9].try_into().unwrap()) & 0x7fff_ffff;
        frames.push(describe(
            buf[at + 3],
            buf[at + 4],
            stream,
            &buf[at + 9..at + 9 + len],
        ));
        at += 9 + len;
    }
    if at < buf.len() && buf.len() - at < 9 {
        frames.push(format!("{} stray bytes", buf.len() - at));
    }
    frames
}

struct Pair {
    _w: Weir,
    plain: u16,
    tls: u16,
    roots: rustls::RootCertStore,
}

fn start() -> Pair {
    let plain = free_port();
    let tls = free_port();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("www")).unwrap();
    std::fs::write(dir.path().join("www/index.html"), "the same page\n").unwrap();
    // More than the initial flow-control windows: its answer stays open.
    std::fs::write(dir.path().join("www/big.bin"), vec![b'x'; 256 << 10]).unwrap();
    let (cert, key, ca) = make_cert(dir.path(), "a", &["a.test"]);
    let cfg = format!(
        "[tls]\nhttp3 = false\n\n\
         [site.\"127.0.0.1:{plain}\"]\nroot = \"www\"\n\n\
         [site.\"a.test\"]\nlisten = \"127.0.0.1:{tls}\"\nroot = \"www\"\n\
         tls = {{ cert = \"{}\", key = \"{}\" }}\n",
        cert.display(),
        key.display()
    );
    let w = Weir::start_in(WEIR, dir, &cfg, &[plain, tls]);
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    Pair {
        _w: w,
        plain,
        tls,
        roots,
    }
}

/// The frames each listener answers the preface and `after_magic` with.
/// `gets`: a GET of `/` on each of these streams is appended, with each
/// side's scheme and authority.
async fn both(p: &Pair, after_magic: &[u8], gets: &[u32]) -> (Vec<String>, Vec<String>) {
    let mut plain_in = MAGIC.to_vec();
    plain_in.extend_from_slice(after_magic);
    let mut tls_in = plain_in.clone();
    for &s in gets {
        plain_in.extend(get(s, false, &format!("127.0.0.1:{}", p.plain)));
        tls_in.extend(get(s, true, "a.test"));
    }
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", p.plain))
        .await
        .unwrap();
    let plain = exchange(tcp, &plain_in).await;
    let tls = exchange(tls_connect(p).await, &tls_in).await;
    (plain, tls)
}

/// A TLS connection to the TLS listener that agreed on HTTP/2.
async fn tls_connect(p: &Pair) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    weir_test_support::tls::install_crypto();
    let mut cfg = rustls::ClientConfig::builder()
        .with_root_certificates(p.roots.clone())
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", p.tls))
        .await
        .unwrap();
    let s = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(ServerName::try_from("a.test").unwrap(), tcp)
        .await
        .unwrap();
    assert_eq!(s.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    s
}

#[tokio::test]
async fn h2c_and_h2_over_tls_answer_the_same_frames() {
    let p = start();
    let settings = frame(SETTINGS, 0, 0, &[]);
    let with = |rest: &[u8]| {
        let mut v = settings.clone();
        v.extend_from_slice(rest);
        v
    };
    let cases: Vec<(&str, Vec<u8>, &[u32])> = vec![
        ("a GET", settings.clone(), &[1]),
        ("two GETs", settings.clone(), &[1, 3]),
        (
            "a PING where SETTINGS must come first",
            frame(PING, 0, 0, &[0; 8]),
            &[],
        ),
        (
            "a SETTINGS frame of 5 bytes",
            frame(SETTINGS, 0, 0, &[0; 5]),
            &[],
        ),
        ("DATA on stream 0", with(&frame(DATA, 0, 0, b"x")), &[]),
        ("HEADERS on an even stream", settings.clone(), &[2]),
        ("streams out of order", settings.clone(), &[3, 1]),
        (
            "a zero WINDOW_UPDATE on the connection",
            with(&frame(WINDOW_UPDATE, 0, 0, &[0; 4])),
            &[],
        ),
        (
            "an unknown frame type, then a PING",
            with(&[frame(0xfa, 0, 0, b"?"), frame(PING, 0, 0, &[7; 8])].concat()),
            &[],
        ),
        (
            "a PING with a 7-byte payload",
            with(&frame(PING, 0, 0, &[1; 7])),
            &[],
        ),
        (
            "SETTINGS with an ENABLE_PUSH of 2",
            frame(SETTINGS, 0, 0, &[0, 2, 0, 0, 0, 2]),
            &[],
        ),
    ];
    for (what, input, gets) in cases {
        let (plain, tls) = both(&p, &input, gets).await;
        assert!(!plain.is_empty(), "{what}: h2c answered nothing");
        assert_eq!(plain, tls, "{what}: h2c and h2 over TLS answer differently");
    }
}

/// A preface cut short, then the client's end of the stream. Over h2c
/// nothing has said HTTP/2 yet, so nothing is answered; over TLS, ALPN
/// has, so the server's own preface (the same SETTINGS frame h2c sends
/// after a whole preface) has gone out first, and nothing follows it.
#[tokio::test]
async fn a_truncated_preface_gets_only_the_servers_preface() {
    let p = start();
    let (whole, _) = both(&p, &frame(SETTINGS, 0, 0, &[]), &[]).await;
    let server_preface = whole[0].clone();
    assert!(
        server_preface.starts_with("type=0x4 flags=0x0 stream=0"),
        "{whole:?}"
    );
    let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", p.plain))
        .await
        .unwrap();
    tcp.write_all(&MAGIC[..10]).await.unwrap();
    tcp.shutdown().await.unwrap();
    let plain = exchange(tcp, &[]).await;
    let mut tls = tls_connect(&p).await;
    tls.write_all(&MAGIC[..10]).await.unwrap();
    tls.shutdown().await.unwrap();
    let tls = exchange(tls, &[]).await;
    assert_eq!(plain, Vec::<String>::new(), "h2c");
    assert_eq!(tls, vec![server_preface], "h2 over TLS");
}

const RST_STREAM: u8 = 0x3;
const GOAWAY: u8 = 0x7;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const NO_ERROR: u32 = 0x0;
const PROTOCOL_ERROR: u32 = 0x1;
const FLOW_CONTROL_ERROR: u32 = 0x3;

/// An HPACK literal field without indexing, new name (RFC 7541 §6.2.2).
fn literal(name: &str, value: &str) -> Vec<u8> {
    let mut b = vec![0x00, name.len() as u8];
    b.extend_from_slice(name.as_bytes());
    b.push(value.len() as u8);
    b.extend_from_slice(value.as_bytes());
    b
}

/// A POST of `/` on stream 1 as one HEADERS frame without END_STREAM: its
/// body is still to come.
fn open_post(port: u16, content_length: Option<&str>) -> Vec<u8> {
    let mut block = vec![0x83, 0x84, 0x86];
    block.extend(literal(":authority", &format!("127.0.0.1:{port}")));
    if let Some(n) = content_length {
        block.extend(literal("content-length", n));
    }
    frame(HEADERS, END_HEADERS, 1, &block)
}

/// A raw h2c connection, read frame by frame.
struct Raw {
    s: tokio::net::TcpStream,
    buf: Vec<u8>,
}

impl Raw {
    async fn open(port: u16) -> Raw {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        s.write_all(&[MAGIC, &frame(SETTINGS, 0, 0, &[])].concat())
            .await
            .unwrap();
        Raw { s, buf: Vec::new() }
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).await.unwrap();
    }

    /// The next frame (type, flags, stream, payload); `None` once the
    /// server closes or says nothing for 3 s.
    async fn next(&mut self) -> Option<(u8, u8, u32, Vec<u8>)> {
        loop {
            if self.buf.len() >= 9 {
                let len = (usize::from(self.buf[0]) << 16)
                    | (usize::from(self.buf[1]) << 8)
                    | usize::from(self.buf[2]);
                if self.buf.len() >= 9 + len {
                    let f: Vec<u8> = self.buf.drain(..9 + len).collect();
                    let stream = u32::from_be_bytes(f[5..9].try_into().unwrap()) & 0x7fff_ffff;
                    return Some((f[3], f[4], stream, f[9..].to_vec()));
                }
            }
            let mut chunk = [0u8; 16384];
            match tokio::time::timeout(Duration::from_secs(3), self.s.read(&mut chunk)).await {
                Ok(Ok(n)) if n > 0 => self.buf.extend_from_slice(&chunk[..n]),
                _ => return None,
            }
        }
    }

    /// Reads until stream 1's answer has ended (END_STREAM on a frame of
    /// it); panics on a reset of stream 1 before.
    async fn answered(&mut self) {
        while let Some((kind, flags, stream, payload)) = self.next().await {
            assert!(
                !(kind == RST_STREAM && stream == 1),
                "stream 1 reset before its answer: {payload:02x?}"
            );
            if stream == 1 && (kind == HEADERS || kind == DATA) && flags & END_STREAM != 0 {
                return;
            }
        }
        panic!("no answer on stream 1");
    }

    /// The error code of the first RST_STREAM on stream 1, if one comes.
    async fn reset(&mut self) -> Option<u32> {
        while let Some((kind, _, stream, payload)) = self.next().await {
            if kind == RST_STREAM && stream == 1 {
                return Some(u32::from_be_bytes(payload[..4].try_into().unwrap()));
            }
        }
        None
    }

    /// Sends a GET of `/` on `stream` and reads until its answer's HEADERS:
    /// whether that says 200 (HPACK's static entry for `:status: 200`),
    /// and the RST_STREAM and GOAWAY frames seen on the way, in words.
    async fn get_ok(&mut self, stream: u32, port: u16) -> (bool, Vec<String>) {
        self.send(&get(stream, false, &format!("127.0.0.1:{port}")))
            .await;
        let mut seen = Vec::new();
        while let Some((kind, flags, id, payload)) = self.next().await {
            if kind == HEADERS && id == stream {
                return (payload.first() == Some(&0x88), seen);
            }
            if kind == RST_STREAM || kind == GOAWAY {
                seen.push(describe(kind, flags, id, &payload));
            }
        }
        (false, seen)
    }
}

/// Issue 55 §6, RFC 9113 §8.1.1 and §6.9.1: a request whose handler has
/// already answered is still held to HTTP/2's framing. h2 checks it only
/// while the request's stream is read, and a handler that answers without
/// reading the body used to let go of it: the stream was reset with
/// NO_ERROR and what followed was ignored. weir now reads such a body on
/// (`server::conn::ReadOn`), so h2's own checks answer each violation.
#[tokio::test]
async fn stream_errors_come_even_after_the_answer() {
    let p = start();
    let port = p.plain;
    // DATA longer than the content-length.
    let mut c = Raw::open(port).await;
    c.send(&open_post(port, Some("1"))).await;
    c.answered().await;
    c.send(&frame(DATA, END_STREAM, 1, b"test")).await;
    assert_eq!(c.reset().await, Some(PROTOCOL_ERROR), "content-length");

    // Trailers that end a body shorter than its content-length (h2 0.4.20
    // closed the stream first and then sent no RST_STREAM:
    // third_party/h2/WEIR-PATCH.md).
    let mut c = Raw::open(port).await;
    c.send(&open_post(port, Some("10"))).await;
    c.answered().await;
    c.send(&frame(DATA, 0, 1, b"test")).await;
    c.send(&frame(
        HEADERS,
        END_HEADERS | END_STREAM,
        1,
        &literal("x-checksum", "1"),
    ))
    .await;
    assert_eq!(
        c.reset().await,
        Some(PROTOCOL_ERROR),
        "content-length, trailers"
    );

    // A second HEADERS frame without END_STREAM.
    let mut c = Raw::open(port).await;
    c.send(&open_post(port, None)).await;
    c.answered().await;
    c.send(&frame(HEADERS, END_HEADERS, 1, &literal("x-more", "1")))
        .await;
    assert_eq!(c.reset().await, Some(PROTOCOL_ERROR), "second HEADERS");

    // WINDOW_UPDATEs that take the window of a stream whose answer is
    // still being sent past 2^31-1 (after the answer:
    // `a_window_overflow_after_the_answer_resets_an_open_stream`).
    let mut c = Raw::open(port).await;
    let mut block = vec![0x82, 0x04, 8];
    block.extend_from_slice(b"/big.bin");
    block.push(0x86);
    block.extend(literal(":authority", &format!("127.0.0.1:{port}")));
    c.send(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &block))
        .await;
    loop {
        let (kind, flags, stream, _) = c.next().await.expect("an answer");
        if kind == HEADERS && stream == 1 {
            assert_eq!(flags & END_STREAM, 0, "the file's answer has a body");
            break;
        }
    }
    let update = frame(WINDOW_UPDATE, 0, 1, &0x7fff_ffffu32.to_be_bytes());
    c.send(&[update.clone(), update].concat()).await;
    assert_eq!(c.reset().await, Some(FLOW_CONTROL_ERROR), "WINDOW_UPDATE");

    // A well-formed body after the answer ends the stream cleanly.
    let mut c = Raw::open(port).await;
    c.send(&open_post(port, Some("4"))).await;
    c.answered().await;
    c.send(&frame(DATA, END_STREAM, 1, b"test")).await;
    let rst = c.reset().await;
    assert!(rst.is_none() || rst == Some(NO_ERROR), "{rst:?}");
}

/// Issue 55 §6, RFC 9113 §8.1: trailers MUST NOT carry pseudo-header
/// fields, and a request whose trailers do is malformed (§8.1.1): a stream
/// error of type PROTOCOL_ERROR, before the answer or after it. h2 0.4.20
/// dropped the field and ended the stream cleanly; weir's h2
/// (third_party/h2/WEIR-PATCH.md) resets it. The connection goes on.
#[tokio::test]
async fn a_pseudo_header_in_trailers_resets_the_stream() {
    let p = start();
    let port = p.plain;
    for after_the_answer in [false, true] {
        let mut c = Raw::open(port).await;
        c.send(&open_post(port, None)).await;
        if after_the_answer {
            c.answered().await;
        }
        c.send(&frame(DATA, 0, 1, b"test")).await;
        // The pseudo-header first: after a regular field h2 already refuses
        // it (§8.3: pseudo-header fields come first).
        let trailers = [literal(":path", "/other"), literal("x-checksum", "1")].concat();
        c.send(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &trailers))
            .await;
        assert_eq!(
            c.reset().await,
            Some(PROTOCOL_ERROR),
            "after the answer: {after_the_answer}"
        );
        let (ok, seen) = c.get_ok(3, port).await;
        assert!(ok, "after the answer: {after_the_answer}: {seen:?}");
        assert_eq!(seen, Vec::<String>::new());
    }
}

/// Issue 55 §6, RFC 9113 §6.9.1: a WINDOW_UPDATE that takes a stream's
/// window past 2^31-1 is RST_STREAM FLOW_CONTROL_ERROR also after weir's
/// answer has ended while the client's side of the stream is still open
/// (half-closed (local), as in h2spec's `http2/6.9.1/3`); h2 0.4.20
/// ignored it there. Once both sides have ended the stream it is closed,
/// and §5.1 allows no RST_STREAM on a closed stream: the update is ignored
/// and the connection goes on.
#[tokio::test]
async fn a_window_overflow_after_the_answer_resets_an_open_stream() {
    let p = start();
    let port = p.plain;
    let update = frame(WINDOW_UPDATE, 0, 1, &0x7fff_ffffu32.to_be_bytes());
    let overflow = [update.clone(), update].concat();

    // Half-closed (local): the request's body is still to come.
    let mut c = Raw::open(port).await;
    c.send(&open_post(port, None)).await;
    c.answered().await;
    c.send(&overflow).await;
    assert_eq!(c.reset().await, Some(FLOW_CONTROL_ERROR));
    let (ok, seen) = c.get_ok(3, port).await;
    assert!(ok, "{seen:?}");
    assert_eq!(seen, Vec::<String>::new());

    // Closed: the GET ended the client's side, the answer weir's.
    let mut c = Raw::open(port).await;
    c.send(&get(1, false, &format!("127.0.0.1:{port}"))).await;
    c.answered().await;
    c.send(&overflow).await;
    let (ok, seen) = c.get_ok(3, port).await;
    assert!(ok, "{seen:?}");
    assert_eq!(seen, Vec::<String>::new(), "a closed stream is not reset");
}

/// Issue 55 §6, RFC 9113 §3.4: on a cleartext port a connection that opens
/// with the first line of the HTTP/2 preface and goes on with anything but
/// the rest of it is closed, with no HTTP/1.1 answer (it used to get a 400).
#[tokio::test]
async fn an_invalid_preface_on_a_cleartext_port_is_closed() {
    let p = start();
    for bad in [
        &b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n"[..],
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\r",
    ] {
        let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", p.plain))
            .await
            .unwrap();
        let got = exchange(&mut tcp, bad).await;
        assert_eq!(got, Vec::<String>::new(), "{bad:?}");
        let mut rest = Vec::new();
        let n = tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut rest))
            .await
            .expect("closed")
            .unwrap_or(0);
        assert_eq!(n, 0, "{:?}", String::from_utf8_lossy(&rest));
    }
}
