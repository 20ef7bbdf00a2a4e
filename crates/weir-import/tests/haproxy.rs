//! Every HAProxy config of `corpus/haproxy/` imported, the weir.toml
//! validated by weir's own config loader, and the report checked for what
//! each one must say.

mod support;

use support::{corpus, import_with, outcome, validate};
use weir_import::{Imported, Kind, Options, Outcome};

fn import(p: &str) -> Imported {
    import_with(Kind::Haproxy, &format!("haproxy/{p}"), None, false)
}

fn no_equivalent(out: &Imported, directive: &str) {
    assert!(
        matches!(outcome(out, directive), Outcome::NoEquivalent(_)),
        "{directive}: {:?}\n{}",
        outcome(out, directive),
        out.report
    );
}

fn approximated(out: &Imported, directive: &str) {
    assert!(
        matches!(outcome(out, directive), Outcome::Approximated(_)),
        "{directive}: {:?}\n{}",
        outcome(out, directive),
        out.report
    );
}

fn mapped(out: &Imported, directive: &str) {
    assert_eq!(
        outcome(out, directive),
        &Outcome::Mapped,
        "{directive}\n{}",
        out.report
    );
}

#[test]
fn debian_default() {
    // No frontend: HAProxy listens on nothing, so there is no site to
    // write; the import says so instead of writing a config weir refuses.
    let opts = weir_import::Options::default();
    let err = weir_import::import(
        weir_import::Kind::Haproxy,
        &corpus("haproxy/debian/haproxy.cfg"),
        &opts,
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("haproxy.cfg:1:1: no frontend or listen section that weir can serve"),
        "{err}"
    );
}

#[test]
fn rate_limit_frontend_with_three_backends() {
    let out = import("rate-limit/haproxy.cfg");
    let cfg = validate(&out);
    assert_eq!(cfg.sites.len(), 1, "{}", out.toml);
    let t = &out.toml;
    assert!(
        t.contains("[site.\":8080\"]\nlisten = \"127.0.0.1:8080\""),
        "{t}"
    );
    assert!(
        t.contains("limit = [{ key = \"client\", window = \"10s\", requests = 40, status = 429, size = 100000 }]"),
        "{t}"
    );
    // option forwardfor: one more field, none of weir's own.
    assert!(
        t.contains("add = { X-Forwarded-For = \"{client_ip}\" }"),
        "{t}"
    );
    assert!(
        t.contains("x_forwarded = false, forwarded = false, via = false"),
        "{t}"
    );
    // use_backend in order, after the http-request answers.
    let order: Vec<usize> = [
        "path = \"/private/\"",
        "path_regex = \"^/old$\"",
        "match = { host = \"example.com\" }",
        "basic_auth",
        "path = \"/api/\"",
        "path_regex = '(?:\\.css|\\.js|\\.png)$'",
        "match = { host = \"static.example.com\" }",
    ]
    .iter()
    .scan(0, |at, k| {
        *at += t[*at..]
            .find(k)
            .unwrap_or_else(|| panic!("no {k} after byte {at} in\n{t}"));
        Some(*at)
    })
    .collect();
    assert_eq!(order.len(), 7, "{t}");
    mapped(&out, "acl host_static");
    approximated(&out, "use_backend static if");
    mapped(&out, "acl is_api");
    approximated(&out, "http-request deny deny_status 429");
    approximated(&out, "http-request auth realm admin");
    mapped(&out, "user alice password");
    approximated(&out, "option httplog");
    approximated(&out, "http-response set-header Cache-Control");
    approximated(&out, "timeout server 30s");
    mapped(&out, "timeout connect 5s");
    mapped(&out, "option forwardfor");
    // The rate limit's window is weir's own (it may let through a request
    // HAProxy's estimate refuses): exit 4, and the sites refuse until the
    // user accepts it (--allow-open); the challenge's wording does not count.
    assert_eq!(out.report.exit_code(), 4);
    assert_eq!(out.access_lost.len(), 1, "{:?}", out.access_lost);
    assert!(out.access_lost[0].contains("sc_http_req_rate(0) gt 40"));
    assert!(
        !out.access_lost
            .iter()
            .any(|l| l.contains("http-request auth"))
    );
    assert!(out.toml.starts_with("# REFUSED"), "{}", out.toml);
}

#[test]
fn sni_passthrough_and_tcp() {
    let out = import("sni-passthrough/haproxy.cfg");
    validate(&out);
    let t = &out.toml;
    assert!(t.contains("[site.\"mail.example.com\"]\nlisten = \"0.0.0.0:443\"\npassthrough = { to = \"10.0.0.7:443\""), "{t}");
    assert!(t.contains("[site.\"example.com\"]"), "{t}");
    assert!(
        t.contains("[tcp.\"postgres\"]\nlisten = \"10.0.0.1:5432\"\nto = \"10.0.1.5:5432\""),
        "{t}"
    );
    no_equivalent(&out, "server db2 10.0.1.6:5432 check backup");
    mapped(&out, "tcp-request inspect-delay 5s");
    approximated(&out, "balance source");
}

#[test]
fn haproxy_examples() {
    let out = import("examples/basic-config-edge.cfg");
    validate(&out);
    let t = &out.toml;
    // :80 and :443 (TLS with the PEM holding certificate and key).
    // `default-path config`: relative to the config's own directory.
    let pem = corpus("haproxy/examples/pub1.pem");
    let pem = std::path::absolute(&pem).unwrap();
    let pem = pem.display();
    assert!(t.contains(&format!("[site.\":443\"]\nlisten = \"0.0.0.0:443\"\ntls = {{ cert = \"{pem}\", key = \"{pem}\" }}")), "{t}");
    mapped(&out, "default-path config");
    assert!(t.contains("match = { protocol = \"http\" }\nredirect = { to = \"https://{host}{uri}\", status = 301 }"), "{t}");
    // del-header then forwardfor: the client's field replaced.
    assert!(
        t.contains("set = { X-Forwarded-For = \"{client_ip}\" }"),
        "{t}"
    );
    assert!(t.contains("balance = \"p2c\""), "{t}");
    no_equivalent(&out, "stats uri /");
    no_equivalent(&out, "http-request cache-use cache");
    approximated(&out, "cookie app1 insert indirect nocache");

    let out = import("examples/content-sw-sample.cfg");
    validate(&out);
    let t = &out.toml;
    assert!(t.contains("path_regex = \"^(?:/img|/css)\""), "{t}");
    no_equivalent(&out, "use_backend static if { hdr_beg(host) -i img }");
    // `option httpchk HEAD /login.php`: the check keeps its method.
    assert!(
        t.contains("health = { path = \"/login.php\", method = \"HEAD\""),
        "{t}"
    );
    mapped(&out, "option httpchk");
    approximated(&out, "monitor-uri");

    let out = import("examples/quick-test.cfg");
    validate(&out);
    assert!(
        out.toml.contains(
            "[site.\":8000\"]\nlisten = \"0.0.0.0:8000\"\nproxy = { to = \"172.31.32.33:8000\""
        ),
        "{}",
        out.toml
    );
}

#[test]
fn guessed_from_its_sections() {
    for p in [
        "debian/haproxy.cfg",
        "rate-limit/haproxy.cfg",
        "examples/quick-test.cfg",
    ] {
        assert_eq!(
            weir_import::guess(&corpus(&format!("haproxy/{p}"))),
            Some(Kind::Haproxy),
            "{p}"
        );
    }
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("lb.cfg");
    std::fs::write(&p, "global\n  daemon\nfrontend fe\n  bind :80\n").unwrap();
    assert_eq!(weir_import::guess(&p), Some(Kind::Haproxy));
}

#[test]
fn unreadable_input_names_the_place() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("bad.cfg");
    std::fs::write(
        &p,
        "frontend fe\n  bind :80\n  http-request set-header X \"open\n",
    )
    .unwrap();
    let e = weir_import::import(Kind::Haproxy, &p, &Options::default()).unwrap_err();
    assert_eq!(e.to_string(), "bad.cfg:3:29: unmatched \" quote");
}
