//! Access logs as the real binary writes them: templates and named formats
//! with every kind of variable, the JSON format, the condition and sample,
//! syslog to a UDP socket of the test, and request IDs, through the proxy
//! (a retried upstream, a slow one, a cached hit) and for static files.

use std::net::UdpSocket;
use std::path::Path;

use weir_test_support::poll::{PATIENCE, poll_until};
use weir_test_support::ports::free_port;
use weir_test_support::proxy::{Upstream, Weir, client};

use crate::WEIR;

/// The log's lines once it has `n` of them (all of them, if it never does).
fn lines(path: &Path, n: usize) -> Vec<String> {
    let read = || {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    // The caller asserts on the lines; fewer than `n` says what came.
    let _ = poll_until(PATIENCE, || read().len() >= n);
    read()
}

/// A number of seconds as the log writes them (`0.305`).
fn secs(s: &str) -> f64 {
    s.parse()
        .unwrap_or_else(|_| panic!("`{s}` is not a number of seconds"))
}

/// A template using every kind of variable, through a proxy whose first
/// upstream is down: the retried attempt is listed, the slow upstream's
/// time is within the delay it was told to add, headers and cookies of
/// both sides are there, and misspelt variables are refused.
#[tokio::test]
async fn a_named_template_through_a_retried_proxy() {
    let a = Upstream::start("a").await;
    let dead = free_port();
    let cfg = format!(
        r#"[server]
workers = 1

[log_format.main]
format = '{{client_ip}} {{method}} {{uri}} {{path}} q={{query}} {{protocol}} {{scheme}} {{host}} {{status}} {{bytes_sent}} in={{bytes_received}} {{site}} {{route}} up={{upstream_addr}} ups={{upstream_status}} ua="{{req.header.User-Agent}}" x={{resp.header.X-Field}} sid={{cookie.sid}} none={{cookie.none}} cache={{cache_status}}|{{upstream_connect_time}}|{{upstream_response_time}}|{{request_time}}|{{time_iso8601}}'

[site."127.0.0.1:{{PORT}}"]
access_log = {{ path = "{{DIR}}/main.log", format = "main" }}

[[site."127.0.0.1:{{PORT}}".route]]
path = "/field/*"
proxy = {{ to = ["127.0.0.1:{dead}", "{a}"], balance = "first", retries = 2 }}

[[site."127.0.0.1:{{PORT}}".route]]
path = "/slow/*"
proxy = {{ to = ["{a}"] }}
"#,
        a = a.addr
    );
    let w = Weir::start(WEIR, &cfg);
    let port = w.addr.port();
    let c = client();
    let r = c
        .get(w.url("/field/v1?k=v%20w"))
        .header("user-agent", "test \"agent\"/1")
        .header("cookie", "x=1; sid=42")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = c.get(w.url("/slow/300")).send().await.unwrap();
    assert_eq!(r.text().await.unwrap(), "a");

    let got = lines(&w.path().join("main.log"), 2);
    assert_eq!(got.len(), 2, "{got:?}");
    let fields: Vec<&str> = got[0].split('|').collect();
    assert_eq!(
        fields[0],
        format!(
            "127.0.0.1 GET /field/v1?k=v%20w /field/v1 q=k=v%20w HTTP/1.1 http 127.0.0.1 200 1 in=0 \
             127.0.0.1:{port} /field/* up=127.0.0.1:{dead}, {a} ups=-, 200 \
             ua=\"test \\x22agent\\x22/1\" x=v1 sid=42 none=- cache=-",
            a = a.addr
        )
    );
    // The dead upstream never connected; the live one did, at once.
    let connect: Vec<&str> = fields[1].split(", ").collect();
    assert_eq!(connect[0], "-", "{}", got[0]);
    assert!(secs(connect[1]) < 1.0, "{}", got[0]);
    let response: Vec<&str> = fields[2].split(", ").collect();
    assert_eq!(response[0], "-", "{}", got[0]);
    assert!(secs(response[1]) < 1.0, "{}", got[0]);
    assert!(secs(fields[3]) < 2.0, "{}", got[0]);
    assert!(
        fields[4].len() == 20 && fields[4].ends_with('Z'),
        "{}",
        got[0]
    );

    // The slow upstream: its response time is the delay it added, at least.
    let slow: Vec<&str> = got[1].split('|').collect();
    assert!(
        slow[0].starts_with(
            "127.0.0.1 GET /slow/300 /slow/300 q=- HTTP/1.1 http 127.0.0.1 200 1 in=0"
        ),
        "{}",
        got[1]
    );
    assert!(
        slow[0].contains(&format!(" /slow/* up={} ups=200 ", a.addr)),
        "{}",
        got[1]
    );
    let (upstream, total) = (secs(slow[2]), secs(slow[3]));
    assert!((0.3..1.5).contains(&upstream), "{}", got[1]);
    assert!(total >= upstream && total < 2.0, "{}", got[1]);
}

/// The JSON format, with every field under its variable's name and numbers
/// as numbers; and a site logging only its errors.
#[tokio::test]
async fn json_lines_and_a_condition() {
    let a = Upstream::start("a").await;
    let cfg = format!(
        r#"[server]
workers = 1

[site."127.0.0.1:{{PORT}}"]
access_log = {{ path = "{{DIR}}/all.json", format = "json" }}
proxy = {{ to = ["{a}"] }}

[site."errors.test:{{PORT}}"]
listen = ["127.0.0.1:{{PORT}}"]
access_log = {{ path = "{{DIR}}/errors.log", format = "{{status}} {{uri}}", if = "status >= 400" }}
respond = {{ status = 200, body = "ok" }}

[[site."errors.test:{{PORT}}".route]]
path = "/gone"
respond = {{ status = 410, body = "gone" }}
"#,
        a = a.addr
    );
    let w = Weir::start(WEIR, &cfg);
    let c = client();
    let r = c
        .post(w.url("/echo?x=1"))
        .header("referer", "http://r/")
        .body("hello")
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), "hello");
    for path in ["/", "/gone", "/", "/gone?again"] {
        c.get(w.url(path))
            .header("host", "errors.test")
            .send()
            .await
            .unwrap();
    }

    let got = lines(&w.path().join("all.json"), 1);
    let j: serde_json::Value = serde_json::from_str(&got[0]).unwrap();
    let port = w.addr.port();
    assert_eq!(j["client_ip"], "127.0.0.1");
    assert!(j["peer_port"].as_u64().unwrap() > 0);
    assert_eq!(j["peer_ip"], "127.0.0.1");
    assert_eq!(j["server_addr"], format!("127.0.0.1:{port}"));
    assert_eq!(j["method"], "POST");
    assert_eq!(j["uri"], "/echo?x=1");
    assert_eq!(j["protocol"], "HTTP/1.1");
    assert_eq!(j["scheme"], "http");
    assert_eq!(j["host"], "127.0.0.1");
    assert_eq!(j["site"], format!("127.0.0.1:{port}"));
    assert_eq!(j["route"], "*");
    assert_eq!(j["status"], 200);
    assert_eq!(j["bytes_received"], 5);
    assert_eq!(j["referer"], "http://r/");
    assert!(j.get("user_agent").is_none(), "{j}");
    assert!(j.get("cache_status").is_none(), "{j}");
    assert_eq!(j["upstream_addr"], serde_json::json!([a.addr.to_string()]));
    assert_eq!(j["upstream_status"], serde_json::json!([200]));
    assert!(j["upstream_connect_time"][0].as_f64().unwrap() < 1.0);
    assert!(j["upstream_response_time"][0].as_f64().unwrap() < 1.0);
    assert!(j["request_time"].as_f64().unwrap() < 1.0);
    assert!(j["duration_ms"].as_f64().unwrap() < 1000.0);
    assert!(j["time"].as_str().unwrap().ends_with('Z'));

    let errors = lines(&w.path().join("errors.log"), 2);
    assert_eq!(errors, ["410 /gone", "410 /gone?again"]);
}

/// Static files in the common format, and the same requests to syslog
/// (RFC 5424 over UDP) received by a socket of the test; a cached answer's
/// cache status.
#[tokio::test]
async fn static_files_syslog_and_a_cache_hit() {
    let sys = UdpSocket::bind("127.0.0.1:0").unwrap();
    sys.set_read_timeout(Some(PATIENCE)).unwrap();
    let origin = free_port();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("www")).unwrap();
    std::fs::write(dir.path().join("www/a.txt"), "0123456789").unwrap();
    let cfg = format!(
        r#"[server]
workers = 1

[site."127.0.0.1:{{PORT}}"]
root = "{www}"
access_log = {{ path = "{{DIR}}/common.log", format = "common" }}

[site."static.test:{{PORT}}"]
listen = ["127.0.0.1:{{PORT}}"]
root = "{www}"
access_log = {{ syslog = "udp://{sys}", tag = "web", format = "{{status}} {{uri}} \"{{req.header.X-Tag}}\"" }}

[site."127.0.0.1:{origin}"]
root = "{www}"
headers = {{ Cache-Control = "max-age=60" }}

[site."cached.test:{{PORT}}"]
listen = ["127.0.0.1:{{PORT}}"]
proxy = {{ to = ["127.0.0.1:{origin}"] }}
cache = true
access_log = {{ path = "{{DIR}}/cache.log", format = "{{cache_status}} {{upstream_status}} {{status}}" }}
"#,
        www = dir.path().join("www").display(),
        sys = sys.local_addr().unwrap(),
    );
    let w = Weir::start(WEIR, &cfg);
    let c = client();
    let r = c.get(w.url("/a.txt")).send().await.unwrap();
    assert_eq!(r.text().await.unwrap(), "0123456789");
    c.get(w.url("/missing")).send().await.unwrap();
    let got = lines(&w.path().join("common.log"), 2);
    assert_eq!(got.len(), 2, "{got:?}");
    let after_time = |l: &str| l.split_once("] ").map(|(_, r)| r.to_string());
    assert!(got[0].starts_with("127.0.0.1 - - ["), "{}", got[0]);
    assert_eq!(
        after_time(&got[0]).as_deref(),
        Some("\"GET /a.txt HTTP/1.1\" 200 10")
    );
    let missing = after_time(&got[1]).unwrap_or_default();
    assert!(
        missing.starts_with("\"GET /missing HTTP/1.1\" 404 "),
        "{}",
        got[1]
    );

    c.get(w.url("/a.txt"))
        .header("host", "static.test")
        .header("x-tag", "s1")
        .send()
        .await
        .unwrap();
    let mut buf = [0u8; 2048];
    let n = sys
        .recv(&mut buf)
        .expect("no syslog message within PATIENCE");
    let msg = std::str::from_utf8(&buf[..n]).unwrap();
    // local7.info: <190>; version 1; the time with milliseconds; the host;
    // the tag; weir's pid; MSGID `access`; no structured data.
    let parts: Vec<&str> = msg.splitn(8, ' ').collect();
    assert_eq!(parts[0], "<190>1", "{msg}");
    assert!(parts[1].len() == 24 && parts[1].ends_with('Z'), "{msg}");
    assert_eq!(parts[3], "web", "{msg}");
    assert_eq!(parts[4], w.child.id().to_string(), "{msg}");
    assert_eq!((parts[5], parts[6]), ("access", "-"), "{msg}");
    assert_eq!(parts[7], "200 /a.txt \"s1\"", "{msg}");

    for _ in 0..2 {
        let r = c
            .get(w.url("/a.txt"))
            .header("host", "cached.test")
            .send()
            .await
            .unwrap();
        assert_eq!(r.text().await.unwrap(), "0123456789");
    }
    let got = lines(&w.path().join("cache.log"), 2);
    assert_eq!(got, ["MISS 200 200", "HIT - 200"]);
}

/// Unknown variables and formats are config errors that suggest the fix.
#[test]
fn misspelt_variables_and_formats_are_refused_with_a_suggestion() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(
        &cfg,
        "[log_format.main]\nformat = '{client_ip} {stauts}'\n\
         [log_format.short]\nformat = '{status}'\n\n\
         [site.\"127.0.0.1:1\"]\nrespond = { status = 200 }\n\
         access_log = { path = \"a.log\", format = \"{req.headers.Host} {uri}\" }\n\n\
         [site.\"127.0.0.1:2\"]\nrespond = { status = 200 }\n\
         access_log = { path = \"a.log\", format = \"shrot\" }\n",
    )
    .unwrap();
    let out = std::process::Command::new(WEIR)
        .args(["validate", "--config", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    for want in [
        ":2:10: log_format.main: unknown log variable `{stauts}`: did you mean `{status}`?",
        "access_log: unknown log variable `{req.headers.Host}`: did you mean `{req.header.Host}`?",
        "access_log: format `shrot` is unknown; did you mean `short`?",
    ] {
        assert!(err.contains(want), "missing {want:?} in:\n{err}");
    }
}

/// A sample of a half logs about half the requests (never all, never none).
#[tokio::test]
async fn a_sample_logs_a_share() {
    let cfg = r#"[server]
workers = 1

[site."127.0.0.1:{PORT}"]
respond = { status = 204 }
access_log = { path = "{DIR}/half.log", format = "{status}", sample = 0.5 }
"#;
    let w = Weir::start(WEIR, cfg);
    let c = client();
    for _ in 0..400 {
        c.get(w.url("/")).send().await.unwrap();
    }
    // 200 expected; fewer than 120 or all 400 is (for a fair draw) as
    // likely as never.
    let got = lines(&w.path().join("half.log"), 120);
    assert!((120..400).contains(&got.len()), "{}", got.len());
    assert!(got.iter().all(|l| l == "204"));
}

/// A request ID crosses weir to the upstream and back, is in the access
/// log and in weir's own error page and log line; a trusted proxy's ID is
/// kept, an untrusted client's replaced.
#[tokio::test]
async fn request_ids_cross_to_the_upstream_and_back() {
    let a = Upstream::start("a").await;
    let dead = free_port();
    let cfg = format!(
        r#"[server]
workers = 1

[site."127.0.0.1:{{PORT}}"]
request_id = {{ response = true }}
access_log = {{ path = "{{DIR}}/ids.log", format = "{{request_id}} {{status}} {{uri}}" }}
proxy = {{ to = ["{a}"] }}

[[site."127.0.0.1:{{PORT}}".route]]
path = "/down"
proxy = {{ to = ["127.0.0.1:{dead}"], retries = 0 }}

[site."trusting.test:{{PORT}}"]
listen = ["127.0.0.1:{{PORT}}"]
request_id = {{ header = "X-Trace-Id", response = true }}
access_log = {{ path = "{{DIR}}/trusting.log", format = "{{request_id}} {{uri}}" }}
proxy = {{ to = ["{a}"], trusted_proxies = ["127.0.0.1"] }}
"#,
        a = a.addr
    );
    let w = Weir::start_logged(WEIR, &cfg);
    let c = client();
    let r = c
        .get(w.url("/hello"))
        .header("x-request-id", "client-chosen")
        .send()
        .await
        .unwrap();
    let id = r.headers()["x-request-id"].to_str().unwrap().to_string();
    assert_eq!(id.len(), 32, "{id}");
    assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
    let seen = a.seen();
    assert_eq!(seen.last().unwrap().headers["x-request-id"], id.as_str());

    let r = c.get(w.url("/down")).send().await.unwrap();
    assert_eq!(r.status(), 502);
    let down = r.headers()["x-request-id"].to_str().unwrap().to_string();
    assert_ne!(down, id);
    let body = r.text().await.unwrap();
    assert!(body.ends_with(&format!("\nrequest id: {down}\n")), "{body}");
    assert!(
        w.wait_log(&format!("request_id=\"{down}\""), PATIENCE)
            || w.wait_log(&format!("request_id={down}"), PATIENCE),
        "{}",
        w.log()
    );

    let r = c
        .get(w.url("/kept"))
        .header("host", "trusting.test")
        .header("x-trace-id", "from-the-lb-1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-trace-id"], "from-the-lb-1");
    assert_eq!(
        a.seen().last().unwrap().headers["x-trace-id"],
        "from-the-lb-1"
    );

    assert_eq!(
        lines(&w.path().join("ids.log"), 2),
        [format!("{id} 200 /hello"), format!("{down} 502 /down")]
    );
    assert_eq!(
        lines(&w.path().join("trusting.log"), 1),
        ["from-the-lb-1 /kept"]
    );
}

/// W3C `traceparent` to upstreams: the client's trace continued with a
/// span of weir's, a new span for the retried attempt; a request without
/// one starts a new trace.
#[tokio::test]
async fn traceparent_continues_the_trace_with_a_span_per_attempt() {
    let first = weir_test_support::proxy::scripted_upstream().await;
    let a = Upstream::start("a").await;
    let cfg = format!(
        r#"[server]
workers = 1

[site."127.0.0.1:{{PORT}}"]
access_log = {{ path = "{{DIR}}/t.log", format = "{{upstream_status}} {{status}}" }}
proxy = {{ to = ["{first}", "{a}"], balance = "first", retries = 1, traceparent = true }}
"#,
        first = first.addr,
        a = a.addr
    );
    let w = Weir::start(WEIR, &cfg);
    let c = client();
    let sent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    // The first upstream closes without answering: the request goes on to a.
    let r = c
        .get(w.url("/nothing"))
        .header("traceparent", sent)
        .header("tracestate", "k=v")
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), "a");
    let head = first.heads.lock().unwrap()[0].to_ascii_lowercase();
    let at_first = head
        .lines()
        .find_map(|l| l.strip_prefix("traceparent: "))
        .unwrap_or_else(|| panic!("no traceparent in {head}"))
        .to_string();
    let seen = a.seen();
    let at_a = seen[0].headers["traceparent"].to_str().unwrap().to_string();
    assert_eq!(seen[0].headers["tracestate"], "k=v");
    for tp in [&at_first, &at_a] {
        assert!(
            tp.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"),
            "{tp}"
        );
        assert!(tp.ends_with("-01"), "{tp}");
        assert_eq!(tp.len(), 55, "{tp}");
        assert_ne!(&tp[36..52], "00f067aa0ba902b7", "weir's span is the parent");
    }
    assert_ne!(at_first[36..52], at_a[36..52], "one span per attempt");
    assert_eq!(lines(&w.path().join("t.log"), 1), ["-, 200 200"]);

    // No traceparent (or a malformed one): a new trace, not sampled.
    c.get(w.url("/nothing"))
        .header("traceparent", "00-zz")
        .send()
        .await
        .unwrap();
    let seen = a.seen();
    let new = seen.last().unwrap().headers["traceparent"]
        .to_str()
        .unwrap();
    assert_eq!(new.len(), 55, "{new}");
    assert!(new.starts_with("00-") && new.ends_with("-00"), "{new}");
    assert_eq!(new.matches('-').count(), 3, "{new}");
}
