//! `weir import nginx` of `map`, `if` and `rewrite … last|break` proved
//! against nginx itself: the corpus's rewrite config (nginx's own examples
//! of the three, with their common uses around them) runs in
//! `/usr/sbin/nginx` and, imported, in weir, in front of the same files
//! and upstreams; the same requests go to both and the answers, and what
//! the upstreams receive, must agree. A missing nginx fails the test: it
//! never skips.

use std::path::PathBuf;

use weir_test_support::ports::free_port;
use weir_test_support::proxy::{Upstream, Weir};

use super::{Nginx, ask_headers, corpus, import_allow_open, no_redirects, same, temp_paths};
use crate::WEIR;

#[tokio::test]
async fn map_if_and_rewrite_answer_as_nginx() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::create_dir_all(dir.join("tmp")).unwrap();
    let www = dir.join("www");
    for d in ["posts", "files/new", "files/old", "download/x/mp3", "docs"] {
        std::fs::create_dir_all(www.join(d)).unwrap();
    }
    std::fs::write(www.join("index.html"), "<h1>home</h1>\n").unwrap();
    std::fs::write(www.join("about.html"), "<p>about</p>\n").unwrap();
    std::fs::write(www.join("posts/post-42.html"), "<p>post 42</p>\n").unwrap();
    std::fs::write(www.join("files/new/a.txt"), "new a\n").unwrap();
    std::fs::write(www.join("files/old/a.txt"), "old a\n").unwrap();
    let song: Vec<u8> = (0..4000u32).map(|i| (i * 31 % 256) as u8).collect();
    std::fs::write(www.join("download/x/mp3/song.mp3"), &song).unwrap();
    let stable = Upstream::start_on("stable", &format!("127.0.0.1:{}", free_port())).await;
    let canary = Upstream::start_on("canary", &format!("127.0.0.1:{}", free_port())).await;

    let ng: Vec<u16> = (0..4).map(|_| free_port()).collect();
    let wp: Vec<u16> = (0..4).map(|_| free_port()).collect();
    let src = std::fs::read_to_string(corpus("nginx/rewrite/nginx.conf")).unwrap();
    let conf = |ports: &[u16], name: &str| -> PathBuf {
        let mut text = src
            .replace("127.0.0.1:9001", &stable.addr.to_string())
            .replace("127.0.0.1:9002", &canary.addr.to_string())
            .replace("/srv/www", &www.display().to_string())
            .replace("http {\n", &temp_paths(dir));
        for (i, p) in ports.iter().enumerate() {
            text = text.replace(&format!("127.0.0.1:808{i}"), &format!("127.0.0.1:{p}"));
        }
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let ng_conf = conf(&ng, "nginx.conf");
    let weir_conf = conf(&wp, "for-weir.conf");
    let _ng = Nginx::start(dir, &ng_conf, ng[3]);
    let out = dir.join("weir.toml");
    // An access rule is approximated (valid_referers is left out): exit 4 and fail closed first.
    let report = import_allow_open("nginx", &weir_conf, &out);
    let toml = std::fs::read_to_string(&out).unwrap();
    let _w = Weir::start_in(WEIR, tempfile::tempdir().unwrap(), &toml, &wp);

    let c = no_redirects();
    let ups = [&stable, &canary];
    let seen = |before: &[usize]| -> Vec<(String, String, Option<String>)> {
        let mut v = Vec::new();
        for (u, b) in ups.iter().zip(before) {
            for s in &u.seen()[*b..] {
                let host = s
                    .headers
                    .get("host")
                    .map(|h| h.to_str().unwrap().to_string());
                v.push((u.name.clone(), s.uri.clone(), host));
            }
        }
        v
    };
    let counts = || ups.iter().map(|u| u.count()).collect::<Vec<_>>();
    let canary_field: &[(&str, &str)] = &[("x-release", "canary")];
    let deny: &[(&str, &str)] = &[("x-deny", "yes")];
    for (server, method, path, fields) in [
        // `if` and the redirect map.
        (0, "GET", "/old-page", &[][..]),
        (0, "GET", "/OLD-PAGE", &[]),
        (0, "GET", "/old-page?x=1", &[]),
        (0, "GET", "/legacy/about", &[]),
        (0, "POST", "/index.html", &[]),
        (0, "GET", "/?preview=1", &[]),
        (0, "GET", "/index.html", &[]),
        (0, "GET", "/about.html", &[]),
        // Internal rewrites: to a file, a proxy, another location.
        (0, "GET", "/blog/42", &[]),
        (0, "GET", "/blog/42/?a=b", &[]),
        (0, "GET", "/blog/x", &[]),
        (0, "GET", "/shop/cart?id=3", &[]),
        (0, "GET", "/shop/", &[]),
        (0, "GET", "/files/old/a.txt", &[]),
        (0, "GET", "/files/old/a.txt", deny),
        (0, "GET", "/files/new/a.txt", &[]),
        (0, "GET", "/files/new/a.txt", deny),
        (0, "GET", "/docs/v1/intro?q=1", &[]),
        (0, "GET", "/docs/other", &[]),
        (0, "GET", "/api/x?y=1", &[]),
        // The download example at server level, then in its location.
        (1, "GET", "/download/x/media/song.wma", &[]),
        (1, "GET", "/download/x/media/song", &[]),
        (1, "GET", "/download/x/audio/none.wav", &[]),
        (1, "GET", "/other", &[]),
        (2, "GET", "/download/x/media/song.wma", &[]),
        (2, "GET", "/download/x/other", &[]),
        (2, "GET", "/elsewhere", &[]),
        // Maps choosing the upstream and a response field.
        (3, "GET", "/a?b=1", canary_field),
        (3, "GET", "/a?b=1", &[]),
        (3, "POST", "/a", &[]),
        (3, "HEAD", "/a", &[]),
        (3, "POST", "/a", canary_field),
    ] {
        let what = format!("{method} {path} (server {server}, fields {fields:?})");
        let set = ["x-cacheable"];
        let before = counts();
        let n = ask_headers(&c, ng[server], method, path, None, fields, &set).await;
        let n_seen = seen(&before);
        let before = counts();
        let w = ask_headers(&c, wp[server], method, path, None, fields, &set).await;
        let w_seen = seen(&before);
        same(&what, &n, &w, &report);
        assert_eq!(n_seen, w_seen, "{what}: what the upstreams received");
    }
}
