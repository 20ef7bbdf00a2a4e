//! Every config of `corpus/index.tsv` (published by projects, vendors and
//! the servers' own docs; none written for weir) imported as a user would:
//! the import reads it or refuses it with the reason the original server
//! would give; the output is accepted by weir's config loader (only files
//! this machine lacks may be missing); the report is consistent with itself,
//! with the exit status and with the file.

mod support;

use std::collections::{HashMap, HashSet};
use std::path::Path;

use support::corpus;
use weir_config::error::{CertCheck, CertProblem};
use weir_import::{Imported, Kind, Options, Outcome};

struct AnyCert;

impl CertCheck for AnyCert {
    fn check(&self, _: &Path, _: &Path) -> Result<(), CertProblem> {
        Ok(())
    }
}

/// The environment the published deployments give these configs (their
/// docs' example values; empty where the variable adds optional lines).
const ENV: &[(&str, &str)] = &[
    ("CADDY_GLOBAL_OPTIONS", ""),
    ("CADDY_EXTRA_CONFIG", ""),
    ("CADDY_SERVER_EXTRA_DIRECTIVES", ""),
    ("GLOBAL_OPTIONS", ""),
    ("MERCURE_EXTRA_DIRECTIVES", ""),
    ("MERCURE_BOLT_EXTRA_DIRECTIVES", ""),
    ("FRANKENPHP_CONFIG", ""),
    ("FRANKENPHP_WORKER_CONFIG", ""),
    ("BASEROW_CADDY_GLOBAL_CONF", ""),
    ("BASEROW_CADDY_ADDRESSES", ":80"),
    ("BASEROW_PUBLIC_URL", "http://localhost"),
    ("DOMAIN", "example.com"),
    ("SITE_ADDRESS", "example.com"),
    ("SERVER_NAME", "localhost"),
    ("FILE_SIZE_LIMIT", "5242880"),
    ("BUCKET_NAME", "uploads"),
    ("CERT_EMAIL", "email admin@example.com"),
    ("PRIVATE_BACKEND_URL", "http://localhost:8000"),
    ("CERT_ACME_DNS", ""),
    ("APP_PUBLIC_PATH", "/app/public"),
    ("PROTOCOL", "http"),
    ("NC_DOMAIN", "cloud.example.com"),
    ("APACHE_HOST", "127.0.0.1"),
    ("APACHE_PORT", "11000"),
    ("ADDITIONAL_TRUSTED_DOMAIN", "office.example.com"),
    ("COLLABORA_HOST", "127.0.0.1"),
    ("ONLYOFFICE_HOST", "127.0.0.1"),
    ("EUROOFFICE_HOST", "127.0.0.1"),
    ("TALK_HOST", "127.0.0.1"),
    ("NOTIFY_PUSH_HOST", "127.0.0.1"),
    ("WHITEBOARD_HOST", "127.0.0.1"),
    ("HARP_HOST", "127.0.0.1"),
    ("CADDY_SERVER_WORKER_COUNT", "2"),
    ("CADDY_SERVER_SERVER_NAME", ":8000"),
    ("CADDY_SERVER_LOG_OPTIONS", ""),
    ("CADDY_SERVER_LOG_LEVEL", "INFO"),
    ("CADDY_SERVER_LOGGER", "json"),
    ("CADDY_SERVER_ADMIN_PORT", "2019"),
    (
        "MERCURE_PUBLISHER_JWT_KEY",
        "!ChangeThisMercureHubJWTSecretKey!",
    ),
    ("MERCURE_PUBLISHER_JWT_ALG", "HS256"),
    (
        "MERCURE_SUBSCRIBER_JWT_KEY",
        "!ChangeThisMercureHubJWTSecretKey!",
    ),
    ("MERCURE_SUBSCRIBER_JWT_ALG", "HS256"),
    ("VULCAIN_UPSTREAM", "http://127.0.0.1:8080"),
    ("HAPROXY_KEYLOG_FC_LOG_FMT", "%ci:%cp"),
    ("HAPROXY_KEYLOG_BC_LOG_FMT", "%si:%sp"),
    ("DOCROOT", "/var/www/html"),
    ("OIDC_CLIENT_CRYPTO_KEY", "k"),
    ("OIDC_CLIENT_ID", "freshrss"),
    ("OIDC_CLIENT_SECRET", "s"),
    (
        "OIDC_PROVIDER_METADATA_URL",
        "https://id.example.com/.well-known/openid-configuration",
    ),
    ("OIDC_REMOTE_USER_CLAIM", "preferred_username"),
    ("OIDC_SCOPES", "openid"),
    ("OIDC_SESSION_INACTIVITY_TIMEOUT", "300"),
    ("OIDC_SESSION_MAX_DURATION", "27200"),
    ("OIDC_SESSION_TYPE", "server-cache"),
    ("OIDC_X_FORWARDED_HEADERS", ""),
];

/// Configs the original server itself would not start as published, and
/// the import's reason, which must name the cause.
const REFUSED: &[(&str, &str)] = &[
    // Files of their deployment that the published source does not hold.
    ("nginx/cryptpad/nginx.conf", "letsencrypt-webroot"),
    ("nginx/cryptpad-advanced/nginx.conf", "letsencrypt-webroot"),
    (
        "nginx/lsio-homeassistant-subdomain/nginx.conf",
        "/config/nginx/ssl.conf",
    ),
    (
        "nginx/lsio-nextcloud-subdomain/nginx.conf",
        "/config/nginx/ssl.conf",
    ),
    (
        "nginx/lsio-vaultwarden-subfolder/nginx.conf",
        "/config/nginx/proxy.conf",
    ),
    (
        "nginx/swag-authelia-server/nginx.conf",
        "/config/nginx/proxy.conf",
    ),
    ("nginx/swag-default/nginx.conf", "/config/nginx/ssl.conf"),
    ("apache/h5bp/httpd.conf", "server_software_information.conf"),
    (
        "apache/freshrss/httpd.conf",
        "/var/www/FreshRSS/p/.htaccess",
    ),
    (
        "nginx/wiki-full-example/nginx.conf",
        "/etc/nginx/proxy.conf",
    ),
    // Templates filled in by a build or a container's entry point, or by the reader.
    ("apache/httpd-dist/httpd.conf", "@@ServerRoot@@"),
    ("nginx/zabbix-web/nginx.conf", "unexpected \"}\""),
    (
        "nginx/baserow-docs/nginx.conf",
        "invalid server name or wildcard \"*YOUR_BACKEND_DOMAIN*\"",
    ),
    (
        "nginx/wiki-wildcard-subdomains/nginx.conf",
        "invalid port in upstream \"127.0.0.1:YOURFCGIPORTHERE\"",
    ),
    // Files included by a main config, which serve nothing alone.
    (
        "apache/httpd-dist-extra-autoindex/httpd.conf",
        "no VirtualHost",
    ),
    ("apache/httpd-dist-extra-dav/httpd.conf", "no VirtualHost"),
    (
        "apache/httpd-dist-extra-default/httpd.conf",
        "no VirtualHost",
    ),
    ("apache/httpd-dist-extra-info/httpd.conf", "no VirtualHost"),
    ("apache/httpd-dist-extra-macro/httpd.conf", "no VirtualHost"),
    ("apache/httpd-dist-extra-mpm/httpd.conf", "no VirtualHost"),
    (
        "apache/httpd-dist-extra-multilang-errordoc/httpd.conf",
        "no VirtualHost",
    ),
    (
        "apache/httpd-dist-extra-proxy-html/httpd.conf",
        "no VirtualHost",
    ),
    (
        "apache/httpd-dist-extra-userdir/httpd.conf",
        "no VirtualHost",
    ),
    ("apache/nagios-cgi/httpd.conf", "no VirtualHost"),
    ("apache/sogo/httpd.conf", "no VirtualHost"),
    // Its Listen is in a file certbot's copy of the tree leaves out.
    ("apache/gentoo-default/httpd.conf", "no VirtualHost"),
    ("nginx/nginx-proxy-manager/nginx.conf", "no `server`"),
    ("nginx/wiki-imap-proxy/nginx.conf", "no `server`"),
    // HAProxy configs whose frontends an API or a controller adds at run time.
    (
        "haproxy/dataplaneapi-backend-switching/haproxy.cfg",
        "no frontend",
    ),
    ("haproxy/dataplaneapi-cache/haproxy.cfg", "no frontend"),
    ("haproxy/dataplaneapi-fcgi-app/haproxy.cfg", "no frontend"),
    (
        "haproxy/dataplaneapi-log-forwards/haproxy.cfg",
        "no frontend",
    ),
    ("haproxy/dataplaneapi-userlists/haproxy.cfg", "no frontend"),
    (
        "haproxy/kubernetes-ingress-default/haproxy.cfg",
        "no frontend",
    ),
    ("haproxy/examples-traces/haproxy.cfg", "no frontend"),
    // Caddy refuses on-demand TLS without an `ask`.
    (
        "caddy/nextcloud-aio-internal/Caddyfile",
        "without a permission module",
    ),
];

fn env() -> HashMap<String, String> {
    ENV.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

struct Entry {
    kind: Kind,
    path: String,
}

fn entries() -> Vec<Entry> {
    let text = std::fs::read_to_string(corpus("index.tsv")).unwrap();
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate().skip(1) {
        let cols: Vec<&str> = line.split('\t').collect();
        assert_eq!(
            cols.len(),
            4,
            "index.tsv:{}: kind, entry, source, licence",
            n + 1
        );
        assert!(
            !cols[2].is_empty() && !cols[3].is_empty(),
            "index.tsv:{}: a source and a licence",
            n + 1
        );
        out.push(Entry {
            kind: Kind::parse(cols[0])
                .unwrap_or_else(|| panic!("index.tsv:{}: kind {}", n + 1, cols[0])),
            path: cols[1].to_string(),
        });
    }
    out
}

#[test]
fn at_least_twenty_of_each_server() {
    let e = entries();
    for k in [Kind::Nginx, Kind::Caddy, Kind::Haproxy, Kind::Apache] {
        let n = e.iter().filter(|x| x.kind == k).count();
        assert!(n >= 20, "{} configs of {}", n, k.name());
    }
    for x in &e {
        assert!(
            corpus(&x.path).is_file(),
            "{} is in index.tsv but not in corpus/",
            x.path
        );
    }
}

/// What is wrong with one import, or nothing.
fn check(e: &Entry) -> Vec<String> {
    let mut problems = Vec::new();
    let opts = Options {
        env: Some(env()),
        ..Options::default()
    };
    let refused = REFUSED.iter().find(|(p, _)| *p == e.path);
    let out: Imported = match (
        weir_import::import(e.kind, &corpus(&e.path), &opts),
        refused,
    ) {
        (Ok(_), Some((_, why))) => return vec![format!("imports, but should be refused ({why})")],
        (Err(err), Some((_, why))) => {
            if !err.to_string().contains(why) {
                problems.push(format!("refused with `{err}`, which does not name {why}"));
            }
            return problems;
        }
        (Err(err), None) => return vec![format!("refused: {err}")],
        (Ok(o), None) => o,
    };
    // The output starts under weir's loader, except for files this machine lacks.
    let tmp = tempfile::tempdir().unwrap();
    if let Err(errs) = weir_config::load_str_with("weir.toml", &out.toml, tmp.path(), &AnyCert) {
        for d in errs.0.iter().filter(|d| !d.machine) {
            problems.push(format!("weir refuses the output: {d}"));
        }
    }
    // One outcome per directive, and the exit status says what the report says.
    let mut seen = HashSet::new();
    for i in &out.report.items {
        if !seen.insert((i.at.to_string(), i.directive.clone())) {
            problems.push(format!("{}: {} is in the report twice", i.at, i.directive));
        }
    }
    let all_mapped = out
        .report
        .items
        .iter()
        .all(|i| i.outcome == Outcome::Mapped);
    let code = out.report.exit_code();
    if all_mapped != (code == 0) {
        problems.push(format!("exit {code} with everything mapped: {all_mapped}"));
    }
    if (code == 4) == out.access_lost.is_empty() {
        problems.push(format!(
            "exit {code} but {} access rules lost",
            out.access_lost.len()
        ));
    }
    if !out.access_lost.is_empty() && !out.toml.starts_with("# REFUSED") {
        problems.push("access rules lost but the output does not say it refuses".into());
    }
    // Each line the report names in the entry file holds the directive it names.
    let main = Path::new(&e.path)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let text = std::fs::read_to_string(corpus(&e.path)).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    for i in &out.report.items {
        if i.at.file != main {
            continue;
        }
        // `(…)`: what the block at that line leaves to a default.
        let word = match i.directive.starts_with('(') {
            true => "",
            false => i.directive.split_whitespace().next().unwrap_or(""),
        };
        let word = word.trim_matches(['<', '>']).to_ascii_lowercase();
        // A line with placeholders is compared as written, before their values.
        let holds = lines.get(i.at.line.wrapping_sub(1)).is_some_and(|l| {
            l.contains("{$") || l.contains("${") || l.to_ascii_lowercase().contains(&word)
        });
        if !holds {
            problems.push(format!(
                "{}: the report names `{}`, which is not on that line",
                i.at, i.directive
            ));
        }
    }
    problems
}

#[test]
fn every_public_config_imports_and_its_output_starts() {
    let mut failures = Vec::new();
    for e in entries() {
        for p in check(&e) {
            failures.push(format!("{}: {p}", e.path));
        }
    }
    assert!(
        failures.is_empty(),
        "{} problems:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
