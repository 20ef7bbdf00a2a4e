//! `weir import nginx` of a Debian nginx running WordPress, proved against
//! nginx itself: Debian's `/etc/nginx` with the WordPress recipe of nginx's
//! wiki as its only site runs in `/usr/sbin/nginx` and, imported, in weir,
//! both in front of the same PHP-FPM pool and document root; the same
//! requests go to both and the answers must agree, except where the
//! import's report says how weir differs. A missing nginx or php-fpm fails
//! the test: it never skips.

use std::path::{Path, PathBuf};

use weir_test_support::ports::free_port;
use weir_test_support::proxy::Weir;

use super::apache::copy_tree;
use super::{Answer, Nginx, ask_with, corpus, import, no_redirects, same, temp_paths};
use crate::WEIR;

/// A WordPress-like tree: `index.php` routes every pretty permalink, the
/// admin's own front script, a few scripts WordPress has at its root,
/// static assets, an upload and dot-files.
fn wordpress(www: &Path) {
    for d in [
        "wp-admin",
        "wp-includes/js",
        "wp-content/themes/twenty",
        "wp-content/uploads/2024/01",
        ".git",
    ] {
        std::fs::create_dir_all(www.join(d)).unwrap();
    }
    let show = |who: &str| {
        format!(
            "<?php echo '{who} ', $_SERVER['REQUEST_METHOD'], ' ', $_SERVER['REQUEST_URI'], \
             ' script=', $_SERVER['SCRIPT_NAME'], ' path_info=', $_SERVER['PATH_INFO'] ?? '(unset)', \
             ' query=', $_SERVER['QUERY_STRING'], \"\\n\";\n"
        )
    };
    std::fs::write(www.join("index.php"), show("front")).unwrap();
    std::fs::write(www.join("wp-login.php"), show("login")).unwrap();
    std::fs::write(www.join("xmlrpc.php"), show("xmlrpc")).unwrap();
    std::fs::write(www.join("wp-admin/index.php"), show("admin")).unwrap();
    std::fs::write(www.join("wp-admin/admin-ajax.php"), show("ajax")).unwrap();
    std::fs::write(
        www.join("wp-config.php"),
        "<?php\ndefine('DB_NAME', 'wordpress');\ndefine('DB_PASSWORD', 'secret');\n",
    )
    .unwrap();
    std::fs::write(
        www.join("wp-content/uploads/2024/01/evil.php"),
        show("uploaded"),
    )
    .unwrap();
    std::fs::write(
        www.join("wp-content/themes/twenty/style.css"),
        "body { color: blue }\n",
    )
    .unwrap();
    std::fs::write(www.join("wp-includes/js/wp.js"), "var wp = {};\n").unwrap();
    let png: Vec<u8> = (0..3000u32).map(|i| (i * 7 % 256) as u8).collect();
    std::fs::write(www.join("wp-content/uploads/2024/01/pic.png"), png).unwrap();
    std::fs::write(www.join("readme.html"), "<p>readme</p>\n").unwrap();
    std::fs::write(www.join("robots.txt"), "User-agent: *\n").unwrap();
    std::fs::write(www.join(".htaccess"), "# BEGIN WordPress\n").unwrap();
    std::fs::write(www.join(".git/config"), "[core]\n").unwrap();
}

/// The WordPress recipe, imported with Debian's nginx.conf around it.
#[tokio::test]
async fn wordpress_on_debian_nginx_answers_as_nginx() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::create_dir_all(dir.join("tmp")).unwrap();
    let www = dir.join("wordpress");
    wordpress(&www);
    let fpm_port = free_port();
    let _fpm = crate::php::PhpFpm::start(&format!("127.0.0.1:{fpm_port}"), 4);

    let (ng_port, weir_port) = (free_port(), free_port());
    let wp = corpus("nginx/wordpress");
    let edit = |t: String| {
        t.replace("/var/www/wordpress", &www.display().to_string())
            .replace(
                "server unix:/run/php/php8.2-fpm.sock;",
                &format!("server 127.0.0.1:{fpm_port};"),
            )
    };
    let both = Both::start(
        dir,
        ng_port,
        weir_port,
        &|etc, edit_all| {
            let site = std::fs::read_to_string(wp.join("nginx.conf")).unwrap();
            std::fs::write(etc.join("sites-enabled/wordpress"), edit_all(&site)).unwrap();
            copy_tree(&wp.join("global"), &etc.join("global"), edit_all);
        },
        &edit,
    );
    let report = both.report.clone();

    let c = no_redirects();
    let host = Some("example.com");
    for (method, path) in [
        ("GET", "/"),
        ("HEAD", "/"),
        ("GET", "/index.php"),
        ("GET", "/2024/01/hello/?x=1"),
        ("GET", "/2024/01/hello"),
        ("GET", "/category/news/?paged=2&s=a+b"),
        ("POST", "/wp-login.php?action=login"),
        ("GET", "/wp-admin/"),
        ("GET", "/wp-admin/admin-ajax.php?action=heartbeat"),
        ("GET", "/xmlrpc.php"),
        ("POST", "/xmlrpc.php"),
        ("GET", "/wp-config.php"),
        ("GET", "/wp-content/themes/twenty/style.css"),
        ("HEAD", "/wp-content/themes/twenty/style.css"),
        ("GET", "/wp-includes/js/wp.js?ver=6.4"),
        ("GET", "/wp-content/uploads/2024/01/pic.png"),
        ("GET", "/wp-content/uploads/2024/01/evil.php"),
        ("GET", "/readme.html"),
        ("GET", "/robots.txt"),
        ("GET", "/favicon.ico"),
        ("GET", "/.htaccess"),
        ("GET", "/.git/config"),
        ("GET", "/missing.php"),
        ("GET", "/missing.css"),
    ] {
        let what = format!("{method} {path} (Host {host:?})");
        let set = ["cache-control", "x-powered-by"];
        let ng = ask_with(&c, ng_port, method, path, host, &set).await;
        let w = ask_with(&c, weir_port, method, path, host, &set).await;
        let (ng, mut w) = front_controller(&what, ng, w, &report);
        if path.contains(".js") && ng.content_type != w.content_type {
            // Debian's mime.types names JavaScript by its old type.
            assert!(
                report.contains("`.js` is text/javascript"),
                "{what}: {:?} / {:?}\n{report}",
                ng.content_type,
                w.content_type
            );
            assert_eq!(ng.content_type.as_deref(), Some("application/javascript"));
            assert!(
                w.content_type
                    .as_deref()
                    .is_some_and(|c| c.starts_with("text/javascript")),
                "{what}: {:?}",
                w.content_type
            );
            w.content_type = ng.content_type.clone();
        }
        if ng.status >= 400 && ng.set.is_empty() && !w.set.is_empty() {
            // `expires` is for successful answers in nginx, every answer in weir.
            assert!(report.contains("on every answer"), "{what}\n{report}");
            assert_eq!(
                w.set,
                [("cache-control".to_string(), "max-age=315360000".to_string())]
            );
            w.set.clear();
        }
        same(&what, &ng, &w, &report);
    }
}

/// A config file's text as a test copy writes it.
pub(super) type Edit<'a> = dyn Fn(&str) -> String + 'a;

/// nginx and weir on one Debian `/etc/nginx` whose only enabled site a
/// test puts in (`site`): one copy for each (paths under `dir`, loopback
/// test ports, IPv4 only, no pid file, then the test's own `edit`), nginx
/// started on the first, the second imported (approximations reported:
/// exit 3) and run by weir.
pub(super) struct Both {
    _nginx: Nginx,
    _weir: Weir,
    pub report: String,
}

impl Both {
    pub(super) fn start(
        dir: &Path,
        ng_port: u16,
        weir_port: u16,
        site: &dyn Fn(&Path, &Edit),
        edit: &dyn Fn(String) -> String,
    ) -> Both {
        let copy = |name: &str, port: u16| -> PathBuf {
            let etc = dir.join(name);
            let d = dir.display().to_string();
            let edit_all = |t: &str| {
                edit(
                    t.replace("/etc/nginx/", &format!("{}/", etc.display()))
                        .replace("/var/log/nginx/", &format!("{d}/"))
                        .replace("pid /run/nginx.pid;", "")
                        .replace("http {\n", &temp_paths(dir))
                        .replace("listen 80;", &format!("listen 127.0.0.1:{port};"))
                        .replace("listen [::]:80;", ""),
                )
            };
            copy_tree(&corpus("nginx/debian/etc/nginx"), &etc, &edit_all);
            std::fs::remove_file(etc.join("sites-enabled/default")).unwrap();
            site(&etc, &edit_all);
            etc.join("nginx.conf")
        };
        let ng_conf = copy("nginx", ng_port);
        let weir_conf = copy("weir-etc", weir_port);
        let nginx = Nginx::start(dir, &ng_conf, ng_port);
        let out = dir.join("weir.toml");
        let (code, report) = import(&weir_conf, &out);
        assert_eq!(
            code, 3,
            "approximations are reported with exit 3:\n{report}"
        );
        let toml = std::fs::read_to_string(&out).unwrap();
        let weir = Weir::start_in(WEIR, tempfile::tempdir().unwrap(), &toml, &[weir_port]);
        Both {
            _nginx: nginx,
            _weir: weir,
            report,
        }
    }
}

/// WordPress's front controller is told the permalink as `PATH_INFO` by
/// weir and not at all by nginx (`try_files … /index.php?$args`): the
/// report must say so, and the rest of what PHP was told must agree.
pub(super) fn front_controller(
    what: &str,
    mut ng: Answer,
    mut w: Answer,
    report: &str,
) -> (Answer, Answer) {
    let cut = |a: &mut Answer| -> Option<String> {
        let body = String::from_utf8(a.body.clone()).ok()?;
        let start = body.find(" path_info=")?;
        let end = start + body[start..].find(" query=")?;
        a.body = format!("{}{}", &body[..start], &body[end..]).into_bytes();
        Some(body[start..end].to_string())
    };
    let (n, x) = (cut(&mut ng), cut(&mut w));
    if n != x {
        assert!(
            report.contains("PATH_INFO"),
            "{what}: PATH_INFO {n:?} / {x:?}, and the report does not name it:\n{report}"
        );
    }
    (ng, w)
}
