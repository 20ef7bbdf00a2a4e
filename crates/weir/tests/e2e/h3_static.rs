//! HTTP/3 gives the same answers as HTTP/1.1 and HTTP/2: status, the headers
//! that matter (content-type, content-length, etag, ...) and body bytes, for
//! static files, HEAD and errors; and TLS responses advertise it with Alt-Svc.

use std::net::SocketAddr;

use weir_test_support::ports::free_port;
use weir_test_support::tls::*;

use crate::WEIR;

/// weir serving `files` from a local-CA HTTPS site on a free port, with
/// HTTP/3 on (and its listener up) or off.
struct Site {
    weir: Weir,
    port: u16,
    addr: SocketAddr,
    root_pem: Vec<u8>,
    _dir: tempfile::TempDir,
}

fn start_site(files: &[(&str, &[u8])], http3: bool) -> Site {
    install_crypto();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("www");
    std::fs::create_dir(&root).unwrap();
    for (name, bytes) in files {
        std::fs::write(root.join(name), bytes).unwrap();
    }
    let storage = dir.path().join("storage");
    let port = free_port();
    let cfg = format!(
        "[tls]\nstorage = \"{}\"\n{}\n[site.\"https://localhost:{port}\"]\nroot = \"{}\"\n",
        storage.display(),
        if http3 { "" } else { "http3 = false\n" },
        root.display()
    );
    let weir = Weir::start_debug(WEIR, dir.path(), &cfg, port);
    if http3 {
        assert!(
            weir.wait_log("HTTP/3", std::time::Duration::from_secs(5)),
            "{}",
            weir.log()
        );
    }
    let root_pem = std::fs::read(storage.join("local-ca/root.pem")).unwrap();
    Site {
        weir,
        port,
        addr: ([127, 0, 0, 1], port).into(),
        root_pem,
        _dir: dir,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h3_matches_h1_and_h2_for_static_files_and_errors() {
    let big: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let css = "body { color: red }\n".repeat(10);
    let site = start_site(
        &[
            ("index.html", b"<h1>hello h3</h1>\n"),
            ("style.css", css.as_bytes()),
            ("data.bin", &big),
        ],
        true,
    );
    let (port, addr, root_pem, weir) = (site.port, site.addr, site.root_pem, site.weir);
    let h1 = reqwest_client(&root_pem, "localhost", addr, false);
    let h2 = reqwest_client(&root_pem, "localhost", addr, true);
    let mut h3 = H3Client::connect(addr, "localhost", roots_from_pem(&root_pem)).await;

    let cases = [
        ("GET", "/"),
        ("GET", "/style.css"),
        ("HEAD", "/style.css"),
        ("GET", "/data.bin"),
        ("GET", "/missing"),
        ("GET", "/no/such/dir/file.txt"),
    ];
    for (method, path) in cases {
        let url = format!("https://localhost:{port}{path}");
        let a = reqwest_get(&h1, method, &url, http::Version::HTTP_11).await;
        let b = reqwest_get(&h2, method, &url, http::Version::HTTP_2).await;
        let c = h3.request(method, &url).await;
        assert_eq!(a, b, "h1 vs h2 for {method} {path}");
        assert_eq!(a, c, "h1 vs h3 for {method} {path}");
        let alt = a.headers.iter().find(|(k, _)| k == "alt-svc");
        assert_eq!(
            alt.map(|(_, v)| v.as_str()),
            Some(format!("h3=\":{port}\"; ma=86400").as_str()),
            "{method} {path}"
        );
    }
    let c = h3
        .request("GET", &format!("https://localhost:{port}/data.bin"))
        .await;
    assert_eq!(c.status, 200);
    assert_eq!(&c.body[..], &big[..]);
    let c = h3
        .request("GET", &format!("https://localhost:{port}/missing"))
        .await;
    assert_eq!(c.status, 404);

    // Many requests on one connection, concurrently.
    let mut futs = Vec::new();
    for _ in 0..20 {
        let mut send = h3.send.clone();
        let url = format!("https://localhost:{port}/style.css");
        futs.push(tokio::spawn(async move {
            let req = http::Request::get(url).body(()).unwrap();
            let mut s = send.send_request(req).await.unwrap();
            finish(&mut s).await;
            s.recv_response().await.unwrap().status().as_u16()
        }));
    }
    for f in futs {
        assert_eq!(f.await.unwrap(), 200);
    }
    drop(h3);
    let logs = weir.stop();
    assert!(logs.contains("stopped"), "{logs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http3_off_means_no_alt_svc() {
    let site = start_site(&[("index.html", b"x")], false);
    let (port, addr, root_pem) = (site.port, site.addr, &site.root_pem);
    let h1 = reqwest_client(root_pem, "localhost", addr, false);
    let a = reqwest_get(
        &h1,
        "GET",
        &format!("https://localhost:{port}/"),
        http::Version::HTTP_11,
    )
    .await;
    assert_eq!(a.status, 200);
    assert!(a.headers.iter().all(|(k, _)| k != "alt-svc"), "{a:?}");
}

/// A GET's answer goes out before the client has ended its request: the
/// response stands, and weir refuses the rest of the request with
/// H3_NO_ERROR (RFC 9114 §4.1.1), not with an error code a client would
/// report as a failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_before_the_request_ends_stands() {
    let site = start_site(&[("index.html", b"early\n")], true);
    let (port, addr, root_pem) = (site.port, site.addr, &site.root_pem);
    let h3 = H3Client::connect(addr, "localhost", roots_from_pem(root_pem)).await;
    let mut send = h3.send.clone();
    let req = http::Request::get(format!("https://localhost:{port}/"))
        .body(())
        .unwrap();
    let mut stream = send.send_request(req).await.unwrap();
    // Scenario: the request's end comes late, weir has answered by then (if
    // not, the finish is plainly accepted and the test still holds).
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    match stream.finish().await {
        Ok(()) => {}
        Err(h3::error::StreamError::RemoteTerminate { code, .. }) => {
            assert_eq!(code, h3::error::Code::H3_NO_ERROR);
        }
        Err(e) => panic!("finishing the request: {e:?}"),
    }
    let resp = stream.recv_response().await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = Vec::new();
    while let Some(mut chunk) = stream.recv_data().await.unwrap() {
        use bytes::Buf;
        body.extend_from_slice(&chunk.copy_to_bytes(chunk.remaining()));
    }
    assert_eq!(body, b"early\n");
}
