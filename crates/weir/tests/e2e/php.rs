//! PHP through FastCGI end to end: the real binary in front of Debian's
//! php-fpm (installed by scripts/test.sh; a missing php-fpm fails the
//! test, it never skips). What a user relies on: a front controller sees
//! the path in `PATH_INFO`, the variables PHP sees are those it sees
//! behind nginx, static files of the root are served by weir, an upload
//! named like a script is never run, a large upload streams in bounded
//! memory, a slow script gives 504, PHP's errors reach weir's log, and
//! thousands of requests reuse no more connections than the pool has
//! children.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use weir_test_support::poll::{PATIENCE, poll_until_async};
use weir_test_support::ports::free_port;
use weir_test_support::proxy::{Weir, client};

use crate::WEIR;

/// Debian's php-fpm binary (the version varies with the release).
fn php_fpm_binary() -> PathBuf {
    let found = std::fs::read_dir("/usr/sbin")
        .ok()
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("php-fpm"))
        });
    found.expect("php-fpm not found in /usr/sbin: this test needs it (apt-get install php-fpm; scripts/test.sh installs it)")
}

/// php-fpm with one static pool of `children`, listening on `listen` (a
/// Unix socket path or `127.0.0.1:port`); killed by PID on drop.
pub(crate) struct PhpFpm {
    child: Child,
    _dir: tempfile::TempDir,
}

impl Drop for PhpFpm {
    /// SIGTERM to the master, which stops its pool's children (a SIGKILL
    /// would leave them running), then SIGKILL if it has not gone.
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl PhpFpm {
    pub(crate) fn start(listen: &str, children: usize) -> PhpFpm {
        let bin = php_fpm_binary();
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        let conf = format!(
            "[global]\n\
             pid = {d}/fpm.pid\n\
             error_log = {d}/fpm.log\n\
             daemonize = no\n\
             [www]\n\
             listen = {listen}\n\
             pm = static\n\
             pm.max_children = {children}\n\
             clear_env = yes\n\
             php_admin_value[post_max_size] = 200M\n\
             php_admin_value[upload_max_filesize] = 200M\n\
             php_admin_value[memory_limit] = 64M\n\
             php_admin_flag[log_errors] = on\n"
        );
        let conf_path = dir.path().join("fpm.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let mut child = Command::new(&bin)
            .args(["-R", "-F", "-y"])
            .arg(&conf_path)
            .arg("-p")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
        let ready = || match listen.parse::<SocketAddr>() {
            Ok(a) => std::net::TcpStream::connect(a).is_ok(),
            Err(_) => Path::new(listen).exists(),
        };
        let start = Instant::now();
        while !ready() {
            if let Ok(Some(st)) = child.try_wait() {
                let log = std::fs::read_to_string(dir.path().join("fpm.log")).unwrap_or_default();
                panic!("php-fpm exited early: {st}\n{log}");
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "php-fpm did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        PhpFpm { child, _dir: dir }
    }
}

/// The application: a front controller printing what PHP was told, and
/// a few other files.
fn app() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    let vars = "['SCRIPT_FILENAME','SCRIPT_NAME','PATH_INFO','DOCUMENT_ROOT','DOCUMENT_URI','REQUEST_URI',\
                'QUERY_STRING','REQUEST_METHOD','CONTENT_TYPE','CONTENT_LENGTH','REMOTE_ADDR','SERVER_PROTOCOL',\
                'GATEWAY_INTERFACE','REQUEST_SCHEME','SERVER_NAME','HTTP_HOST','HTTP_X_TEST','PHP_SELF','HTTPS']";
    std::fs::write(
        p.join("index.php"),
        format!(
            "<?php\nheader('Content-Type: text/plain');\nheader('X-Front: yes');\n\
             foreach ({vars} as $k) {{ echo $k, '=', $_SERVER[$k] ?? '(unset)', \"\\n\"; }}\n\
             echo 'POST=', json_encode($_POST), \"\\n\";\n"
        ),
    )
    .unwrap();
    std::fs::write(
        p.join("info.php"),
        std::fs::read(p.join("index.php")).unwrap(),
    )
    .unwrap();
    std::fs::write(p.join("slow.php"), "<?php sleep(3); echo 'late';\n").unwrap();
    std::fs::write(
        p.join("log.php"),
        "<?php error_log('boom from php'); header('Status: 418 I am a teapot'); setcookie('a','1'); setcookie('b','2'); echo 'logged';\n",
    )
    .unwrap();
    std::fs::write(
        p.join("upload.php"),
        "<?php $in = fopen('php://input', 'rb'); $n = 0; $h = hash_init('md5');\n\
         while (!feof($in)) { $b = fread($in, 65536); $n += strlen($b); hash_update($h, $b); }\n\
         echo $n, ' ', hash_final($h);\n",
    )
    .unwrap();
    std::fs::write(p.join("hello.php"), "<?php echo 'hello';\n").unwrap();
    std::fs::write(p.join("style.css"), "body{color:red}").unwrap();
    std::fs::create_dir(p.join("uploads")).unwrap();
    std::fs::write(p.join("uploads/evil.jpg"), "<?php echo 'EXECUTED';\n").unwrap();
    std::fs::create_dir(p.join("admin")).unwrap();
    std::fs::write(p.join("admin/index.php"), "<?php echo 'admin home';\n").unwrap();
    std::fs::create_dir(p.join(".git")).unwrap();
    std::fs::write(p.join(".git/hook.php"), "<?php echo 'hidden ran';\n").unwrap();
    d
}

fn vars(body: &str) -> std::collections::BTreeMap<String, String> {
    body.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// nginx with the PHP configuration its documentation and WordPress give
/// (`try_files $uri =404` in the `.php` location, `fastcgi_split_path_info`).
struct Nginx {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn nginx_for(root: &Path, fpm: &str) -> Nginx {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let port = free_port();
    let root = root.display();
    let conf = format!(
        "error_log {d}/error.log warn;\npid {d}/nginx.pid;\nevents {{ worker_connections 64; }}\n\
         http {{\n access_log off;\n client_body_temp_path {d}/body;\n fastcgi_temp_path {d}/fastcgi;\n\
          proxy_temp_path {d}/proxy;\n uwsgi_temp_path {d}/uwsgi;\n scgi_temp_path {d}/scgi;\n\
          server {{\n  listen 127.0.0.1:{port};\n  server_name php.test;\n  root {root};\n  index index.php;\n\
           location / {{ try_files $uri $uri/ /index.php$uri?$args; }}\n\
           location ~ [^/]\\.php(/|$) {{\n\
             fastcgi_split_path_info ^(.+?\\.php)(/.*)$;\n\
             try_files $fastcgi_script_name =404;\n\
             set $path_info $fastcgi_path_info;\n\
             fastcgi_param PATH_INFO $path_info;\n\
             include /etc/nginx/fastcgi_params;\n\
             fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;\n\
             fastcgi_pass unix:{fpm};\n\
           }}\n  }}\n}}\n"
    );
    let path = dir.path().join("nginx.conf");
    std::fs::write(&path, conf).unwrap();
    let child = Command::new("/usr/sbin/nginx")
        .arg("-p")
        .arg(dir.path())
        .arg("-c")
        .arg(&path)
        .args(["-g", "daemon off; master_process off;"])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("nginx (apt-get install nginx; scripts/test.sh installs it)");
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "nginx did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Nginx {
        child,
        port,
        _dir: dir,
    }
}

#[tokio::test]
async fn php_front_controller_variables_static_files_and_the_upload_attack() {
    let root = app();
    let fpm_dir = tempfile::tempdir().unwrap();
    let sock = fpm_dir.path().join("fpm.sock").display().to_string();
    let _fpm = PhpFpm::start(&sock, 4);
    let w = Weir::start_logged(
        WEIR,
        &format!(
            "[site.\"php.test\"]\nlisten = \"127.0.0.1:{{PORT}}\"\nroot = \"{}\"\nphp = \"unix:{sock}\"\n",
            root.path().display()
        ),
    );
    let nginx = nginx_for(root.path(), &sock);
    let c = client();
    let get = |base: String, path: &str| {
        let c = c.clone();
        let url = format!("{base}{path}");
        async move {
            let r = c
                .get(&url)
                .header("Host", "php.test")
                .header("X-Test", "t1")
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            let headers = r.headers().clone();
            (status, headers, r.text().await.unwrap())
        }
    };
    let weir_base = format!("http://{}", w.addr);
    let nginx_base = format!("http://127.0.0.1:{}", nginx.port);

    // A front controller routes a path that names no file.
    let (st, h, body) = get(weir_base.clone(), "/a/b?x=1").await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(h["x-front"], "yes");
    let v = vars(&body);
    assert_eq!(v["PATH_INFO"], "/a/b");
    assert_eq!(v["SCRIPT_NAME"], "/index.php");
    assert_eq!(v["REQUEST_URI"], "/a/b?x=1");
    assert_eq!(v["QUERY_STRING"], "x=1");

    // What PHP sees is what it sees behind nginx, for the same requests.
    for path in ["/info.php/extra/path?q=1&r=2", "/a/b?x=1", "/", "/info.php"] {
        let (ws, _, wb) = get(weir_base.clone(), path).await;
        let (ns, _, nb) = get(nginx_base.clone(), path).await;
        assert_eq!((ws, ns), (200, 200), "{path}: weir {wb}\nnginx {nb}");
        let (wv, nv) = (vars(&wb), vars(&nb));
        for k in [
            "SCRIPT_FILENAME",
            "SCRIPT_NAME",
            "PATH_INFO",
            "DOCUMENT_ROOT",
            "REQUEST_URI",
            "QUERY_STRING",
            "REQUEST_METHOD",
            "REMOTE_ADDR",
            "SERVER_PROTOCOL",
            "GATEWAY_INTERFACE",
            "REQUEST_SCHEME",
            "SERVER_NAME",
            "HTTP_HOST",
            "HTTP_X_TEST",
            "PHP_SELF",
            "HTTPS",
        ] {
            assert_eq!(
                wv.get(k),
                nv.get(k),
                "{path}: {k}\nweir:\n{wb}\nnginx:\n{nb}"
            );
        }
    }

    // Static files of the root come from weir, not PHP.
    let (st, h, body) = get(weir_base.clone(), "/style.css").await;
    assert_eq!((st, body.as_str()), (200, "body{color:red}"));
    assert_eq!(h["content-type"], "text/css; charset=utf-8");
    // A directory with an index script: its canonical path (the same 308
    // as a static directory gets, which keeps a POST a POST), then the
    // script.
    let manual = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    for method in [reqwest::Method::GET, reqwest::Method::POST] {
        let r = manual
            .request(method.clone(), format!("{weir_base}/admin?x=1"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 308, "{method}");
        assert_eq!(r.headers()["location"], "/admin/?x=1", "{method}");
    }
    let r = c
        .get(format!("{weir_base}/admin?x=1"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200, "redirect followed");
    assert_eq!(r.url().path(), "/admin/");
    assert_eq!(r.text().await.unwrap(), "admin home");

    // An upload named like a script is never run, nor sent to the front
    // controller (CVE-2019-11043 family); nginx's safe config agrees.
    for path in [
        "/uploads/evil.jpg/x.php",
        "/uploads/evil.jpg/index.php",
        "/missing.php",
        "/.git/hook.php",
    ] {
        let (st, _, body) = get(weir_base.clone(), path).await;
        assert_eq!(st, 404, "{path}: {body}");
        assert!(
            !body.contains("EXECUTED") && !body.contains("hidden ran"),
            "{path}: {body}"
        );
    }
    let (st, _, body) = get(nginx_base.clone(), "/uploads/evil.jpg/x.php").await;
    assert_eq!(st, 404, "nginx: {body}");
    // Traversal is refused before any file is looked at.
    let resp = weir_test_support::proxy::raw(
        &w,
        b"GET /../../etc/passwd.php HTTP/1.1\r\nHost: php.test\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 400"), "{resp}");

    // A form POST reaches PHP's $_POST; Status and repeated fields pass.
    let r = c
        .post(format!("{weir_base}/index.php"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body("name=weir&n=2")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let v = vars(&r.text().await.unwrap());
    assert_eq!(v["POST"], r#"{"name":"weir","n":"2"}"#);
    assert_eq!(v["CONTENT_TYPE"], "application/x-www-form-urlencoded");
    let r = c.get(format!("{weir_base}/log.php")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 418);
    assert_eq!(r.headers().get_all("set-cookie").iter().count(), 2);
    assert_eq!(r.text().await.unwrap(), "logged");
    // PHP's stderr (error_log) is in weir's log.
    assert!(
        weir_test_support::poll::poll_until(Duration::from_secs(5), || w
            .log()
            .contains("boom from php")),
        "log:\n{}",
        w.log()
    );
}

/// Counts the connections weir opens to php-fpm (a relay in between).
async fn counting_relay(to: SocketAddr) -> (SocketAddr, Arc<AtomicUsize>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let n = Arc::new(AtomicUsize::new(0));
    let count = n.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                if let Ok(mut u) = tokio::net::TcpStream::connect(to).await {
                    let _ = tokio::io::copy_bidirectional(&mut s, &mut u).await;
                }
            });
        }
    });
    (addr, n)
}

#[tokio::test]
async fn php_upload_timeout_and_connections_within_the_pool() {
    let root = app();
    let fpm_port = free_port();
    let fpm_addr: SocketAddr = ([127, 0, 0, 1], fpm_port).into();
    let _fpm = PhpFpm::start(&fpm_addr.to_string(), 4);
    let (relay, opened) = counting_relay(fpm_addr).await;
    let w = Weir::start_logged(
        WEIR,
        &format!(
            "[server.limits]\nbody = \"200MiB\"\n[server.timeouts]\nbody = \"2s\"\n\
             [site.\"php.test\"]\nlisten = \"127.0.0.1:{{PORT}}\"\nroot = \"{}\"\n\
             php = {{ to = \"{relay}\", max_conns = 4, keep_conn = true, read_timeout = \"1s\" }}\n",
            root.path().display()
        ),
    );
    let c = client();
    let base = format!("http://{}", w.addr);

    // 10,000 requests, 32 at a time: every one answered, over no more
    // connections (kept open: `keep_conn`) than php-fpm has children.
    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let c = c.clone();
        let url = format!("{base}/hello.php");
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            while done.fetch_add(1, Ordering::SeqCst) < 10_000 {
                let r = c.get(&url).send().await.unwrap();
                assert_eq!(r.status().as_u16(), 200);
                assert_eq!(r.text().await.unwrap(), "hello");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let n = opened.load(Ordering::SeqCst);
    assert!(n <= 4, "{n} connections opened to a pool of 4 children");

    // A 100 MB upload streams through: weir's memory stays bounded.
    let base_rss = w.rss_kib();
    let total: usize = 100 * 1024 * 1024;
    let chunk = bytes::Bytes::from(vec![b'x'; 64 * 1024]);
    let stream = futures_util::stream::iter(
        (0..total / chunk.len()).map(move |_| Ok::<_, std::io::Error>(chunk.clone())),
    );
    let peak = Arc::new(AtomicUsize::new(0));
    let sampler = {
        let peak = peak.clone();
        let pid = w.child.id();
        tokio::spawn(async move {
            loop {
                if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status"))
                    && let Some(kb) = s
                        .lines()
                        .find_map(|l| l.strip_prefix("VmRSS:"))
                        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
                {
                    peak.fetch_max(kb, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let r = c
        .post(format!("{base}/upload.php"))
        .header("Content-Type", "application/octet-stream")
        .header("Content-Length", total.to_string())
        .body(reqwest::Body::wrap_stream(stream))
        .send()
        .await
        .unwrap();
    sampler.abort();
    assert_eq!(r.status().as_u16(), 200);
    let body = r.text().await.unwrap();
    let expect_md5 = {
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!("head -c {total} /dev/zero | tr '\\0' 'x' | md5sum"))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()
            .unwrap()
            .to_string()
    };
    assert_eq!(body, format!("{total} {expect_md5}"));
    let grew = peak
        .load(Ordering::Relaxed)
        .saturating_sub(base_rss as usize);
    assert!(
        grew < 32 * 1024,
        "weir's RSS grew by {grew} KiB during a 100 MB upload"
    );

    // A script slower than read_timeout: 504, and weir serves on.
    let t = Instant::now();
    let r = c.get(format!("{base}/slow.php")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 504);
    assert!(
        t.elapsed() < Duration::from_millis(2900),
        "{:?}",
        t.elapsed()
    );
    let r = c.get(format!("{base}/hello.php")).send().await.unwrap();
    assert_eq!(r.text().await.unwrap(), "hello");
    assert!(w.log().contains("slow.php"), "{}", w.log());

    // An upload that stops half-way (server.timeouts.body, 2 s here): 408,
    // the connection closed, and weir serves on.
    let mut s = tokio::net::TcpStream::connect(w.addr).await.unwrap();
    s.write_all(b"POST /upload.php HTTP/1.1\r\nHost: php.test\r\nContent-Length: 1000\r\n\r\nhalf")
        .await
        .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut answer))
        .await
        .expect("a stalled upload was never cut off")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.ends_with("408 Request Timeout\n"), "{answer}");
    let r = c.get(format!("{base}/hello.php")).send().await.unwrap();
    assert_eq!(r.text().await.unwrap(), "hello");
}

/// Issue 55: php-fpm stopped, its socket path misspelt, or its port
/// refusing: a 502 whose log line names the socket or address and the OS
/// error (as the proxy's), not a 503 "no upstream is available"; php-fpm
/// back on the same socket is used at once (a handler's only upstream is
/// never ejected); 503 only when a configured queue is full.
#[tokio::test]
async fn php_fpm_failures_are_502s_naming_the_socket_and_the_os_error() {
    let root = app();
    let sockets = tempfile::tempdir().unwrap();
    let sock = sockets.path().join("php-fpm.sock");
    let misspelt = sockets.path().join("php-fmp.sock");
    let refused = free_port();
    let w = Weir::start_logged(
        WEIR,
        &format!(
            "[site.\"php.test\"]\nlisten = \"127.0.0.1:{{PORT}}\"\nroot = \"{r}\"\n\
             php = \"unix:{}\"\n\
             [site.\"misspelt.test\"]\nlisten = \"127.0.0.1:{{PORT}}\"\nroot = \"{r}\"\n\
             php = \"unix:{}\"\n\
             [site.\"refused.test\"]\nlisten = \"127.0.0.1:{{PORT}}\"\nroot = \"{r}\"\n\
             php = \"127.0.0.1:{refused}\"\n\
             [site.\"busy.test\"]\nlisten = \"127.0.0.1:{{PORT}}\"\nroot = \"{r}\"\n\
             php = {{ to = \"unix:{}\", max_conns = 1, queue = 0 }}\n",
            sock.display(),
            misspelt.display(),
            sock.display(),
            r = root.path().display(),
        ),
    );
    let c = client();
    let get = async |host: &str, path: &str| {
        c.get(format!("http://{}{path}", w.addr))
            .header("host", host)
            .send()
            .await
            .unwrap()
    };
    // Some line of the log holds every one of `parts`.
    let logged = |parts: &[&str]| {
        let log = w.log();
        assert!(
            log.lines().any(|l| parts.iter().all(|p| l.contains(p))),
            "no line with all of {parts:?}:\n{log}"
        );
    };
    let sock_s = sock.display().to_string();
    let misspelt_s = misspelt.display().to_string();
    let refused_s = format!("127.0.0.1:{refused}");
    for (host, path, named, os) in [
        (
            "php.test",
            "/hello.php",
            &sock_s,
            "No such file or directory",
        ),
        (
            "misspelt.test",
            "/info.php",
            &misspelt_s,
            "No such file or directory",
        ),
        (
            "refused.test",
            "/index.php",
            &refused_s,
            "Connection refused",
        ),
    ] {
        // Ten times: as many failures as it takes, still a 502 each time.
        for _ in 0..10 {
            assert_eq!(get(host, path).await.status(), 502, "{host}");
        }
        logged(&[
            &format!("FastCGI GET {path}: cannot connect"),
            named,
            os,
            "502",
        ]);
    }
    assert!(!w.log().contains("no upstream is available"), "{}", w.log());

    // php-fpm starts on the socket: answered at once.
    let _fpm = PhpFpm::start(&sock_s, 1);
    let r = get("php.test", "/hello.php").await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "hello");

    // One connection, no queue: while a slow script holds it, a 503. (A
    // slow request that lost the slot to a quick one is sent again.)
    let slow_url = format!("http://{}/slow.php", w.addr);
    let mut slow: Option<tokio::task::JoinHandle<()>> = None;
    let busy = poll_until_async(PATIENCE, async || {
        if slow.as_ref().is_none_or(|t| t.is_finished()) {
            let req = c.get(&slow_url).header("host", "busy.test").send();
            slow = Some(tokio::spawn(async move {
                let _ = req.await;
            }));
        }
        get("busy.test", "/hello.php").await.status() == 503
    })
    .await;
    assert!(busy, "no 503 with the one connection busy:\n{}", w.log());
    logged(&[
        "FastCGI GET /hello.php: the upstream's queue is full",
        "503",
    ]);
}

/// Issue 55: with PHP-FPM's default pool of 5 children cut to 4 and weir's
/// default `max_conns = 5`, a fifth kept-alive connection waited in
/// php-fpm's backlog for a child another idle connection held (a request
/// stalled ~5 s). The defaults must not stall: 40 clients, none waits 2 s.
#[tokio::test]
async fn a_pool_smaller_than_max_conns_stalls_no_request() {
    let root = app();
    let sockets = tempfile::tempdir().unwrap();
    let sock = sockets.path().join("php-fpm.sock");
    let _fpm = PhpFpm::start(&sock.display().to_string(), 4);
    let w = Weir::start_logged(
        WEIR,
        &format!(
            "[site.\"php.test\"]\nlisten = \"127.0.0.1:{{PORT}}\"\nroot = \"{}\"\n\
             php = \"unix:{}\"\n",
            root.path().display(),
            sock.display()
        ),
    );
    let c = client();
    let url = format!("http://{}/hello.php", w.addr);
    let mut tasks = Vec::new();
    for _ in 0..40 {
        let (c, url) = (c.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            let mut slowest = Duration::ZERO;
            for _ in 0..25 {
                let t = Instant::now();
                let r = c.get(&url).send().await.unwrap();
                assert_eq!(r.status(), 200);
                assert_eq!(r.text().await.unwrap(), "hello");
                slowest = slowest.max(t.elapsed());
            }
            slowest
        }));
    }
    let mut slowest = Duration::ZERO;
    for t in tasks {
        slowest = slowest.max(t.await.unwrap());
    }
    assert!(
        slowest < Duration::from_secs(2),
        "a request took {slowest:?} with a pool of 4 children and max_conns 5"
    );
}
