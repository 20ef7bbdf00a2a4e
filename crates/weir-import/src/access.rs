//! Which directives grant or deny access (authentication, address lists,
//! ACL-based denials and redirects, rate limits, TLS client verification,
//! HTTPS redirects), per server, and what the import does when one of them
//! could not be kept exactly: the sites it writes refuse every request
//! unless the user asked for the approximation (`--allow-open`).
//!
//! Owns the classification and the fail-closed rewrite only: never decides
//! how a directive maps.

use crate::Kind;
use crate::report::{Outcome, Report};
use crate::toml::{Table, V};

/// Whether `directive` (as the report writes it) grants or denies access.
pub fn is_access(kind: Kind, directive: &str) -> bool {
    let d = directive.trim();
    let first = d.split_whitespace().next().unwrap_or("");
    let lower = d.to_ascii_lowercase();
    let https_redirect = (lower.contains("https://") || lower.contains("scheme https"))
        && (lower.contains("redir") || lower.contains("return 30") || lower.contains("rewrite"));
    if https_redirect {
        return true;
    }
    match kind {
        Kind::Nginx => {
            matches!(
                first,
                "auth_basic"
                    | "auth_basic_user_file"
                    | "auth_request"
                    | "auth_jwt"
                    | "allow"
                    | "deny"
                    | "satisfy"
                    | "limit_req"
                    | "limit_req_zone"
                    | "limit_conn"
                    | "limit_conn_zone"
                    | "limit_except"
                    | "ssl_verify_client"
                    | "ssl_client_certificate"
                    | "ssl_trusted_certificate"
                    | "internal"
                    | "valid_referers"
                    | "secure_link"
            ) || (first == "return" && lower.contains(" 403"))
                || (first == "return" && lower.contains(" 444"))
                || (first == "if" && (lower.contains("return 403") || lower.contains("return 444")))
                || (first == "location" && lower.contains("deny"))
        }
        Kind::Caddy => {
            matches!(
                first,
                "basic_auth"
                    | "basicauth"
                    | "forward_auth"
                    | "rate_limit"
                    | "abort"
                    | "error"
                    | "remote_ip"
                    | "client_ip"
                    | "client_auth"
                    | "trusted_ca_cert_file"
                    | "mode"
            ) || (first == "respond" && (lower.contains(" 401") || lower.contains(" 403")))
                || lower.contains("remote_ip")
                || lower.contains("client_ip")
        }
        Kind::Haproxy => {
            let rule = |k: &str| d.starts_with(k);
            (rule("http-request")
                && [
                    " deny",
                    " auth",
                    " tarpit",
                    " reject",
                    " redirect",
                    " silent-drop",
                    " track-sc",
                    " sc-inc",
                    " return",
                ]
                .iter()
                .any(|w| lower.contains(w)))
                || (rule("tcp-request")
                    && [" reject", " track-sc", " silent-drop", " content reject"]
                        .iter()
                        .any(|w| lower.contains(w)))
                || rule("http-response deny")
                || matches!(first, "block" | "redirect" | "stick-table" | "userlist")
                // A userlist's users, not `user`/`group` in `global` (the process's).
                || (matches!(first, "user" | "group")
                    && (lower.contains(" password ") || lower.contains(" insecure-password ")
                        || lower.contains(" users ")))
                || (first == "bind" && (lower.contains(" verify ") || lower.contains(" ca-file ")))
        }
        Kind::Apache => {
            matches!(
                first.to_ascii_lowercase().as_str(),
                "require"
                    | "allow"
                    | "deny"
                    | "order"
                    | "satisfy"
                    | "authtype"
                    | "authname"
                    | "authuserfile"
                    | "authgroupfile"
                    | "authbasicprovider"
                    | "authbasicfake"
                    | "<requireall>"
                    | "<requireany>"
                    | "<requirenone>"
                    | "<limit>"
                    | "<limitexcept>"
                    | "<limit"
                    | "<limitexcept"
                    | "sslverifyclient"
                    | "sslcacertificatefile"
                    | "sslrequire"
            ) || (first.eq_ignore_ascii_case("RewriteRule")
                && (lower.contains("[f") || lower.contains(",f]") || lower.contains(",f,")))
        }
    }
}

/// Marks every access directive of the report.
pub fn classify(kind: Kind, report: &mut Report) {
    for i in &mut report.items {
        i.access = i.stricter || is_access(kind, &i.directive);
    }
}

/// The access directives the import could not keep exactly.
pub fn not_kept(report: &Report) -> Vec<String> {
    report
        .items
        .iter()
        .filter(|i| i.access && !i.stricter && i.outcome != Outcome::Mapped)
        .map(|i| format!("{}: {}", i.at, i.directive))
        .collect()
}

/// Every site refuses every request (403, before its routes), with a
/// comment saying why: what fails closed when an access rule was lost.
pub fn fail_closed(tables: &mut [Table]) {
    for t in tables.iter_mut() {
        if t.array || !is_site(&t.header) {
            continue;
        }
        t.keys.retain(|(k, _)| k != "allow" && k != "deny");
        t.set("deny", V::strs(["0.0.0.0/0", "::/0"]));
        t.comments.push(
            "weir import: refused (deny all): an access rule could not be kept exactly; \
             see the top of this file"
                .into(),
        );
    }
}

/// `site."NAME"` itself, not one of its sub-tables.
pub(crate) fn is_site(header: &str) -> bool {
    let Some(rest) = header.strip_prefix("site.") else {
        return false;
    };
    // `"name"` then nothing: a quoted key holds no unescaped quote.
    rest.starts_with('"') && rest.ends_with('"') && rest[1..rest.len() - 1].find('"').is_none()
        || (!rest.starts_with('"') && !rest.contains('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_directives_per_server() {
        assert!(is_access(Kind::Nginx, "auth_basic \"x\""));
        assert!(is_access(
            Kind::Nginx,
            "return 301 https://$host$request_uri"
        ));
        assert!(!is_access(Kind::Nginx, "root /srv"));
        assert!(is_access(Kind::Caddy, "basic_auth /admin/*"));
        assert!(!is_access(Kind::Caddy, "file_server"));
        assert!(is_access(Kind::Haproxy, "http-request deny if bad"));
        assert!(is_access(
            Kind::Haproxy,
            "http-request redirect scheme https unless { ssl_fc }"
        ));
        assert!(!is_access(Kind::Haproxy, "http-request set-header X-A b"));
        assert!(is_access(Kind::Apache, "Require valid-user"));
        assert!(is_access(Kind::Apache, "RewriteRule ^/private - [F,L]"));
        assert!(!is_access(Kind::Apache, "DocumentRoot /srv"));
    }

    #[test]
    fn sites_refuse_and_say_why() {
        let mut site = Table::new("site.\"a.example:80\"", false);
        site.set("allow", V::strs(["10.0.0.0/8"]));
        site.set("root", V::s("/srv"));
        let mut tls = Table::new("site.\"a.example:80\".tls", false);
        tls.set("cert", V::s("c"));
        let mut route = Table::new("site.\"a.example:80\".route", true);
        route.set("path", V::s("/x"));
        let mut tables = vec![site, tls, route];
        fail_closed(&mut tables);
        assert_eq!(tables[0].get("deny"), Some(&V::strs(["0.0.0.0/0", "::/0"])));
        assert_eq!(tables[0].get("allow"), None);
        assert!(tables[1].get("deny").is_none());
        assert!(tables[2].get("deny").is_none());
    }
}
