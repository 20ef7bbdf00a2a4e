//! `weir import nginx` of a `stream` block (TCP load balancing) proved
//! against nginx itself: the corpus's stream config runs in
//! `/usr/sbin/nginx` and, imported, in weir, in front of the same two echo
//! services; the bytes echoed through both servers' TCP listeners must
//! agree, and so must what a client sees when an upstream, then both, are
//! down. A missing nginx (or its stream module) fails the test: it never
//! skips.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use weir_test_support::ports::free_port;
use weir_test_support::proxy::Weir;

use super::{Nginx, corpus, import};
use crate::WEIR;
use crate::layer4::{echo, say};

/// Debian builds nginx's stream module apart (libnginx-mod-stream) and
/// loads it from modules-enabled; the test's nginx loads it by name.
const STREAM_MODULE: &str = "/usr/lib/nginx/modules/ngx_stream_module.so";

/// A conversation of three messages on one connection: each answer, its
/// upstream's tag cut off, must be the message; returns the tags.
async fn talk(port: u16) -> Vec<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut tags = Vec::new();
    for msg in ["hello", "second message", "x"] {
        s.write_all(msg.as_bytes()).await.unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 256];
        // The tag and the message may arrive in pieces.
        while got.len() < msg.len() + 2 {
            let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
                .await
                .unwrap_or_else(|_| panic!("port {port}: no echo of {msg:?}"))
                .unwrap();
            assert!(n > 0, "port {port}: closed before echoing {msg:?}");
            got.extend_from_slice(&buf[..n]);
        }
        let got = String::from_utf8(got).unwrap();
        assert_eq!(&got[2..], msg, "port {port}: the echo");
        tags.push(got[..2].to_string());
    }
    tags
}

/// What a client sees when no upstream answers: the connection closes
/// (or is reset) without a byte, well before the deadline.
async fn closed(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)).await else {
        return false;
    };
    let _ = s.write_all(b"anyone?").await;
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(Duration::from_secs(15), s.read(&mut buf)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

/// Until `addr` refuses connections (an aborted echo task drops its
/// listener on its next poll).
async fn refused(addr: std::net::SocketAddr) {
    let start = Instant::now();
    while TcpStream::connect(addr).await.is_ok() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{addr} still accepts"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn stream_proxy_echoes_as_nginx() {
    assert!(
        Path::new(STREAM_MODULE).exists(),
        "{STREAM_MODULE} not found: this test needs nginx's stream module (apt-get install libnginx-mod-stream; scripts/test.sh installs it)"
    );
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (e1, h1) = echo("1:").await;
    let (e2, h2) = echo("2:").await;

    let (ng_port, weir_port) = (free_port(), free_port());
    let src = std::fs::read_to_string(corpus("nginx/stream/nginx.conf")).unwrap();
    // Loopback test ports, the echo services for the database servers, and
    // the UDP server on a free loopback port (weir leaves it out).
    let conf = |port: u16, name: &str, head: &str| -> PathBuf {
        let text = src
            .replace("server 10.0.0.5:5432;", &format!("server {e1};"))
            .replace("server 10.0.0.6:5432;", &format!("server {e2};"))
            .replace("listen 5432;", &format!("listen 127.0.0.1:{port};"))
            .replace(
                "listen 53 udp;",
                &format!("listen 127.0.0.1:{} udp;", free_port()),
            )
            .replace("10.0.0.53:53", &format!("127.0.0.1:{}", free_port()));
        let p = dir.join(name);
        std::fs::write(&p, format!("{head}{text}")).unwrap();
        p
    };
    let ng_conf = conf(
        ng_port,
        "nginx.conf",
        &format!("load_module {STREAM_MODULE};\n"),
    );
    let weir_conf = conf(weir_port, "for-weir.conf", "");
    let _ng = Nginx::start(dir, &ng_conf, ng_port);
    let out = dir.join("weir.toml");
    let (code, report) = import(&weir_conf, &out);
    assert_eq!(code, 3, "{report}");
    assert!(report.contains("weir proxies TCP streams only"), "{report}");
    let toml = std::fs::read_to_string(&out).unwrap();
    let _w = Weir::start_in(WEIR, tempfile::tempdir().unwrap(), &toml, &[weir_port]);

    // Both upstreams take connections in turn through both servers (in
    // each of weir's workers: 8 connections give one of them both).
    for port in [ng_port, weir_port] {
        let mut tags = Vec::new();
        for _ in 0..8 {
            let t = talk(port).await;
            assert!(t.iter().all(|x| *x == t[0]), "one connection, one upstream");
            tags.push(t[0].clone());
        }
        let ones = tags.iter().filter(|t| *t == "1:").count();
        if port == ng_port {
            assert_eq!(ones, 4, "nginx: round robin {tags:?}");
        } else {
            assert!((1..8).contains(&ones), "weir: both upstreams {tags:?}");
        }
    }

    // One upstream down: both servers connect to the other.
    h1.abort();
    refused(e1).await;
    for port in [ng_port, weir_port] {
        for i in 0..4 {
            let msg = format!("down{i}");
            assert_eq!(
                say(port, &msg).await.as_deref(),
                Some(format!("2:{msg}").as_str()),
                "port {port}: with {e1} down"
            );
        }
    }

    // Both down: the client's connection is closed.
    h2.abort();
    refused(e2).await;
    assert!(closed(ng_port).await, "nginx: connection closed");
    assert!(closed(weir_port).await, "weir: connection closed");
}
