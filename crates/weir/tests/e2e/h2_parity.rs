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
