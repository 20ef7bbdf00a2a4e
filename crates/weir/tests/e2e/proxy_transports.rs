//! Upstream transports: HTTP/2 cleartext (h2c), TLS (HTTP/1.1 and HTTP/2,
//! with verification and the explicit opt-out), Unix sockets.

use std::sync::{Arc, Mutex};

use weir_test_support::proxy::{self, Weir, client, serve_hyper as serve, spawn_server};

use crate::WEIR;

type Seen = Arc<Mutex<Vec<proxy::Seen>>>;

#[tokio::test]
async fn h2c_upstream() {
    let seen: Seen = Arc::default();
    let s2 = seen.clone();
    let (addr, _t) = spawn_server(move |s| serve(s, true, "h2", s2.clone())).await;
    let w = Weir::start(
        WEIR,
        &format!("[site.\"127.0.0.1:{{PORT}}\"]\nproxy = {{ to = [\"h2c://{addr}\"] }}\n"),
    );
    let c = client();
    for _ in 0..3 {
        let r = c
            .post(w.url("/echo?q=1"))
            .body("over h2")
            .send()
            .await
            .unwrap();
        assert_eq!(r.text().await.unwrap(), "over h2");
    }
    let s = seen.lock().unwrap().pop().unwrap();
    assert!(s.uri.ends_with("/echo?q=1"), "{}", s.uri);
    assert_eq!(s.headers["x-forwarded-for"], "127.0.0.1");
}

#[tokio::test]
async fn unix_socket_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.sock");
    let l = tokio::net::UnixListener::bind(&path).unwrap();
    let seen: Seen = Arc::default();
    let s2 = seen.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(serve(s, false, "unix", s2.clone()));
        }
    });
    let w = Weir::start(
        WEIR,
        &format!(
            "[site.\"127.0.0.1:{{PORT}}\"]\nproxy = {{ to = [\"unix:{}\"] }}\n",
            path.display()
        ),
    );
    let r = client().get(w.url("/")).send().await.unwrap();
    assert_eq!(r.text().await.unwrap(), "unix");
}

fn tls_acceptor(h2: bool) -> tokio_rustls::TlsAcceptor {
    let key = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let cert = key.cert.der().clone();
    let pk = rustls_pki_types::PrivateKeyDer::try_from(key.signing_key.serialize_der()).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], pk)
        .unwrap();
    cfg.alpn_protocols = vec![if h2 {
        b"h2".to_vec()
    } else {
        b"http/1.1".to_vec()
    }];
    tokio_rustls::TlsAcceptor::from(Arc::new(cfg))
}

async fn tls_upstream(h2: bool, sni: Arc<Mutex<Option<String>>>) -> std::net::SocketAddr {
    let acc = tls_acceptor(h2);
    let (addr, _t) = spawn_server(move |s| {
        let (acc, sni) = (acc.clone(), sni.clone());
        async move {
            let Ok(t) = acc.accept(s).await else { return };
            *sni.lock().unwrap() = t.get_ref().1.server_name().map(String::from);
            serve(t, h2, "tls", Arc::default()).await;
        }
    })
    .await;
    addr
}

#[tokio::test]
async fn tls_upstreams_with_sni_and_verification() {
    for (scheme, h2) in [("https", false), ("h2", true)] {
        let sni = Arc::new(Mutex::new(None));
        let addr = tls_upstream(h2, sni.clone()).await;
        let port = addr.port();
        // Self-signed: refused by default (502), accepted with the opt-out.
        let w = Weir::start(
            WEIR,
            &format!(
                "[site.\"127.0.0.1:{{PORT}}\"]\ndefault = true\nproxy = {{ to = [\"{scheme}://localhost:{port}\"], retries = 0 }}\n\
             [site.\"insecure.test\"]\nlisten = \"127.0.0.1:{{PORT}}\"\n\
             proxy = {{ to = [\"{scheme}://localhost:{port}\"], tls_verify = false, sni = \"app.internal\" }}\n"
            ),
        );
        let c = client();
        assert_eq!(
            c.get(w.url("/")).send().await.unwrap().status(),
            502,
            "{scheme}"
        );
        let r = c
            .get(w.url("/"))
            .header("host", "insecure.test")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{scheme}");
        assert_eq!(r.text().await.unwrap(), "tls");
        assert_eq!(sni.lock().unwrap().as_deref(), Some("app.internal"));
    }
}
