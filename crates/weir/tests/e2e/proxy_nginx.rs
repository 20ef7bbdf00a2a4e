//! weir in front of a real nginx (Debian's `/usr/sbin/nginx`, installed by
//! `scripts/test.sh`): static bytes, statuses, the forwarding headers as
//! nginx reads them, and upstream keep-alive seen from nginx's side
//! (`$connection_requests`). A missing nginx fails the test: it never skips.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use weir_test_support::ports::free_port;
use weir_test_support::proxy::{Weir, client};

use crate::WEIR;

const NGINX: &str = "/usr/sbin/nginx";

/// nginx on a loopback port, all its files in a temporary directory;
/// killed by PID on drop.
struct Nginx {
    child: Child,
    addr: SocketAddr,
    dir: tempfile::TempDir,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Nginx {
    fn start() -> Nginx {
        assert!(
            Path::new(NGINX).exists(),
            "{NGINX} not found: this test needs nginx (apt-get install nginx; scripts/test.sh installs it)"
        );
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display().to_string();
        std::fs::create_dir(dir.path().join("www")).unwrap();
        std::fs::create_dir(dir.path().join("tmp")).unwrap();
        let port = free_port();
        let conf = format!(
            "error_log {d}/error.log warn;\n\
             pid {d}/nginx.pid;\n\
             events {{ worker_connections 64; }}\n\
             http {{\n\
               access_log off;\n\
               client_body_temp_path {d}/tmp/body;\n\
               proxy_temp_path {d}/tmp/proxy;\n\
               fastcgi_temp_path {d}/tmp/fastcgi;\n\
               uwsgi_temp_path {d}/tmp/uwsgi;\n\
               scgi_temp_path {d}/tmp/scgi;\n\
               keepalive_requests 1000;\n\
               keepalive_timeout 60s;\n\
               server {{\n\
                 listen 127.0.0.1:{port};\n\
                 root {d}/www;\n\
                 location = /headers {{\n\
                   default_type text/plain;\n\
                   return 200 \"$http_x_forwarded_for|$http_x_forwarded_proto|$http_host|$http_via|$connection_requests\\n\";\n\
                 }}\n\
               }}\n\
             }}\n"
        );
        let conf_path = dir.path().join("nginx.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let mut child = Command::new(NGINX)
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&conf_path)
            .args(["-g", "daemon off; master_process off;"])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {NGINX}: {e}"));
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let start = Instant::now();
        while std::net::TcpStream::connect(addr).is_err() {
            if let Ok(Some(st)) = child.try_wait() {
                let log = std::fs::read_to_string(dir.path().join("error.log")).unwrap_or_default();
                panic!("nginx exited early: {st}\n{log}");
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "nginx did not start"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        Nginx { child, addr, dir }
    }
}

#[tokio::test]
async fn weir_in_front_of_nginx() {
    let ng = Nginx::start();
    // Not text, not a round size: every byte must come through unchanged.
    let file: Vec<u8> = (0..300_007u32).map(|i| (i * 7 % 256) as u8).collect();
    std::fs::write(ng.dir.path().join("www/file.bin"), &file).unwrap();
    let w = Weir::start(
        WEIR,
        &format!(
            "[server]\nworkers = 1\n[site.\"127.0.0.1:{{PORT}}\"]\nproxy = {{ to = [\"{}\"] }}\n",
            ng.addr
        ),
    );
    let c = client();

    let r = c.get(w.url("/file.bin")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["content-length"],
        file.len().to_string().as_str()
    );
    assert_eq!(r.headers()["via"], "1.1 weir");
    assert!(r.headers().get("last-modified").is_some());
    assert_eq!(r.bytes().await.unwrap().as_ref(), &file[..]);

    let r = c.get(w.url("/missing")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert!(r.text().await.unwrap().contains("nginx"));

    let headers =
        |text: String| -> Vec<String> { text.trim_end().split('|').map(String::from).collect() };
    let first = headers(
        c.get(w.url("/headers"))
            .header("x-forwarded-for", "6.6.6.6")
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    );
    // Direct mode: the client's own X-Forwarded-For is replaced.
    assert_eq!(first[0], "127.0.0.1", "{first:?}");
    assert_eq!(first[1], "http");
    assert_eq!(first[2], w.addr.to_string());
    assert_eq!(first[3], "1.1 weir");
    let second = headers(
        c.get(w.url("/headers"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    );
    // The same upstream connection served every request so far.
    let (n1, n2): (u32, u32) = (first[4].parse().unwrap(), second[4].parse().unwrap());
    assert!(n1 >= 3, "{first:?}");
    assert_eq!(n2, n1 + 1, "{first:?} then {second:?}");
}
