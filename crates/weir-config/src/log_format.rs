//! Access-log formats and sinks: `[log_format.NAME]` and a site's
//! `access_log`, compiled once at load into a list of segments (literal
//! text and variables) that the server walks per line. Owns the variable
//! names and their parsing; never formats a line itself (weir-server does).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use http::HeaderName;

/// A variable of a log template: `{client_ip}`, `{req.header.User-Agent}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Var {
    /// The client's address, after the site's trusted proxies.
    ClientIp,
    /// The TCP peer's address, whatever `X-Forwarded-For` says.
    PeerIp,
    /// The TCP peer's port.
    PeerPort,
    /// The local address and port the request came in on.
    ServerAddr,
    /// `27/Nov/2026:18:05:01 +0000`.
    TimeLocal,
    /// `2026-11-27T18:05:01Z`.
    TimeIso8601,
    /// `Fri, 27 Nov 2026 18:05:01 GMT`.
    TimeHttp,
    /// Seconds since the epoch, with milliseconds: `1795802701.123`.
    TimeUnix,
    Method,
    /// Path and query as the client sent them.
    Uri,
    Path,
    /// The query without its `?` (`-` when there is none).
    Query,
    /// `HTTP/1.1`, `HTTP/2.0`, `HTTP/3.0`.
    Protocol,
    /// `http` or `https`.
    Scheme,
    /// The Host without its port.
    Host,
    Status,
    /// The response body's bytes as its `Content-Length` declares them.
    BytesSent,
    /// The request body's bytes as its `Content-Length` declares them.
    BytesReceived,
    /// Seconds from the request head to the response head, with milliseconds.
    RequestTime,
    /// The same in milliseconds, with microseconds.
    DurationMs,
    /// The site's name as written in the config.
    Site,
    /// The route's pattern (`*` for the site's own handler).
    Route,
    /// Each upstream tried, in order: `10.0.0.1:8080, 10.0.0.2:8080`.
    UpstreamAddr,
    /// The status of each upstream tried (`-` for one that never answered).
    UpstreamStatus,
    /// Seconds to get a connection to each upstream tried.
    UpstreamConnectTime,
    /// Seconds from sending to each upstream to its response head.
    UpstreamResponseTime,
    /// `HIT`, `MISS`, `STALE`, `PASS` (from the response's `Cache-Status`).
    CacheStatus,
    /// The request's ID (`request_id`), or the `X-Request-ID` it came with.
    RequestId,
    /// `TLSv1.2`, `TLSv1.3` (nginx's `$ssl_protocol`); none without TLS.
    TlsProtocol,
    /// The cipher suite's IANA name (nginx's `$ssl_cipher`).
    TlsCipher,
    /// The name the client's TLS asked for (nginx's `$ssl_server_name`).
    TlsServerName,
    /// The protocol ALPN chose: `h2`, `http/1.1`, `h3`.
    TlsAlpn,
    /// The user name of the request's Basic credentials (nginx's `$remote_user`).
    RemoteUser,
    /// What the limits did: `PASSED`, `DELAYED`, `REJECTED`,
    /// `DELAYED_DRY_RUN`, `REJECTED_DRY_RUN` (nginx's `$limit_req_status`).
    LimitStatus,
    /// The name of the limit that rejected or delayed the request.
    LimitName,
    /// What authentication did: `PASSED`, `REFUSED`, `FAILED`.
    AuthStatus,
    ReqHeader(HeaderName),
    RespHeader(HeaderName),
    Cookie(String),
}

/// Every plain variable name, in the order the docs list them.
pub const NAMES: &[(&str, Var)] = &[
    ("client_ip", Var::ClientIp),
    ("peer_ip", Var::PeerIp),
    ("peer_port", Var::PeerPort),
    ("server_addr", Var::ServerAddr),
    ("time_local", Var::TimeLocal),
    ("time_iso8601", Var::TimeIso8601),
    ("time_http", Var::TimeHttp),
    ("time_unix", Var::TimeUnix),
    ("method", Var::Method),
    ("uri", Var::Uri),
    ("path", Var::Path),
    ("query", Var::Query),
    ("protocol", Var::Protocol),
    ("scheme", Var::Scheme),
    ("host", Var::Host),
    ("status", Var::Status),
    ("bytes_sent", Var::BytesSent),
    ("bytes_received", Var::BytesReceived),
    ("request_time", Var::RequestTime),
    ("duration_ms", Var::DurationMs),
    ("site", Var::Site),
    ("route", Var::Route),
    ("upstream_addr", Var::UpstreamAddr),
    ("upstream_status", Var::UpstreamStatus),
    ("upstream_connect_time", Var::UpstreamConnectTime),
    ("upstream_response_time", Var::UpstreamResponseTime),
    ("cache_status", Var::CacheStatus),
    ("request_id", Var::RequestId),
    ("tls_protocol", Var::TlsProtocol),
    ("tls_cipher", Var::TlsCipher),
    ("tls_server_name", Var::TlsServerName),
    ("tls_alpn", Var::TlsAlpn),
    ("remote_user", Var::RemoteUser),
    ("limit_status", Var::LimitStatus),
    ("limit_name", Var::LimitName),
    ("auth_status", Var::AuthStatus),
];

/// The prefixed variables: `{req.header.NAME}`, `{resp.header.NAME}`, `{cookie.NAME}`.
const PREFIXES: &[&str] = &["req.header.", "resp.header.", "cookie."];

impl Var {
    /// The variable's name, as a template writes it and as the JSON
    /// format's key (the prefixed ones are never in the JSON format).
    pub fn name(&self) -> &'static str {
        NAMES.iter().find(|(_, v)| v == self).map_or("", |(n, _)| n)
    }

    /// Whether the variable needs the proxy to record its attempts.
    pub fn upstream(&self) -> bool {
        matches!(
            self,
            Var::UpstreamAddr
                | Var::UpstreamStatus
                | Var::UpstreamConnectTime
                | Var::UpstreamResponseTime
        )
    }

    /// Whether the variable needs the connection to keep what its TLS
    /// handshake settled.
    pub fn tls(&self) -> bool {
        matches!(
            self,
            Var::TlsProtocol | Var::TlsCipher | Var::TlsServerName | Var::TlsAlpn
        )
    }
}

/// How a template's values are escaped (nginx's `escape=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Escape {
    /// `"`, `\` and bytes outside printable ASCII as `\xHH`; an empty or
    /// missing value as `-`.
    Default,
    /// As inside a JSON string; a missing value as nothing.
    Json,
    /// As they are; a missing value as `-`.
    None,
}

/// One piece of a compiled template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    Lit(String),
    Var(Var),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line with every plain variable the request
    /// has (one it lacks is left out), plus `referer` and `user_agent`.
    Json,
    Template {
        segments: Vec<Segment>,
        escape: Escape,
    },
}

/// nginx's `combined`, as weir names its variables.
pub const COMBINED: &str = "{client_ip} - {remote_user} [{time_local}] \"{method} {uri} {protocol}\" {status} {bytes_sent} \"{req.header.Referer}\" \"{req.header.User-Agent}\"";
/// The NCSA common log format.
pub const COMMON: &str = "{client_ip} - {remote_user} [{time_local}] \"{method} {uri} {protocol}\" {status} {bytes_sent}";

impl LogFormat {
    /// Compiles `template` (`{name}` for variables, `{{` and `}}` for braces).
    pub fn template(template: &str, escape: Escape) -> Result<LogFormat, String> {
        Ok(LogFormat::Template {
            segments: compile(template)?,
            escape,
        })
    }

    /// A built-in format by name (`combined`, `common`, `json`).
    pub fn builtin(name: &str) -> Option<LogFormat> {
        let t = match name {
            "json" => return Some(LogFormat::Json),
            "combined" => COMBINED,
            "common" => COMMON,
            _ => return None,
        };
        LogFormat::template(t, Escape::Default).ok()
    }

    /// Whether a line needs what a connection's TLS handshake settled.
    pub fn uses_tls(&self) -> bool {
        match self {
            LogFormat::Json => true,
            LogFormat::Template { segments, .. } => segments
                .iter()
                .any(|s| matches!(s, Segment::Var(v) if v.tls())),
        }
    }

    /// Whether a line needs the upstream attempts recorded by the proxy.
    pub fn uses_upstream(&self) -> bool {
        match self {
            LogFormat::Json => true,
            LogFormat::Template { segments, .. } => segments
                .iter()
                .any(|s| matches!(s, Segment::Var(v) if v.upstream())),
        }
    }
}

fn compile(t: &str) -> Result<Vec<Segment>, String> {
    let mut out = Vec::new();
    let mut lit = String::new();
    let mut rest = t;
    while let Some(i) = rest.find(['{', '}']) {
        lit.push_str(&rest[..i]);
        let b = rest.as_bytes()[i];
        rest = &rest[i + 1..];
        if rest.as_bytes().first() == Some(&b) {
            lit.push(b as char);
            rest = &rest[1..];
            continue;
        }
        if b == b'}' {
            return Err("a `}` that closes nothing (write `}}` for a brace)".into());
        }
        let Some(end) = rest.find('}') else {
            return Err("a `{` that is never closed (write `{{` for a brace)".into());
        };
        let name = rest[..end].trim();
        rest = &rest[end + 1..];
        if !lit.is_empty() {
            out.push(Segment::Lit(std::mem::take(&mut lit)));
        }
        out.push(Segment::Var(variable(name)?));
    }
    lit.push_str(rest);
    if !lit.is_empty() {
        out.push(Segment::Lit(lit));
    }
    Ok(out)
}

/// A variable by name; an unknown one is an error suggesting the nearest.
pub fn variable(name: &str) -> Result<Var, String> {
    if let Some((_, v)) = NAMES.iter().find(|(n, _)| *n == name) {
        return Ok(v.clone());
    }
    let header = |n: &str| {
        HeaderName::from_bytes(n.as_bytes())
            .map_err(|_| format!("`{n}` in `{{{name}}}` is not a header name"))
    };
    if let Some(h) = name.strip_prefix("req.header.") {
        return Ok(Var::ReqHeader(header(h)?));
    }
    if let Some(h) = name.strip_prefix("resp.header.") {
        return Ok(Var::RespHeader(header(h)?));
    }
    if let Some(c) = name.strip_prefix("cookie.") {
        if c.is_empty() || c.contains([';', '=', ' ']) {
            return Err(format!("`{{{name}}}`: not a cookie name"));
        }
        return Ok(Var::Cookie(c.to_string()));
    }
    // A misspelt prefix (`{req.headers.Host}`) is told with its name kept.
    if let Some((pre, rest)) = name.split_once('.')
        && let Some(p) = crate::error::suggest(&format!("{pre}."), PREFIXES).or_else(|| {
            rest.split_once('.')
                .and_then(|(mid, _)| crate::error::suggest(&format!("{pre}.{mid}."), PREFIXES))
        })
    {
        let tail = name.rsplit('.').next().unwrap_or_default();
        return Err(format!(
            "unknown log variable `{{{name}}}`: did you mean `{{{p}{tail}}}`?"
        ));
    }
    let names: Vec<&str> = NAMES.iter().map(|(n, _)| *n).collect();
    Err(match crate::error::suggest(name, &names) {
        Some(s) => format!("unknown log variable `{{{name}}}`: did you mean `{{{s}}}`?"),
        None => format!(
            "unknown log variable `{{{name}}}` (see docs/logging.md for the list: client_ip, method, uri, status, req.header.NAME...)"
        ),
    })
}

/// An escape setting by name.
pub fn escape(s: &str) -> Result<Escape, String> {
    match s {
        "default" => Ok(Escape::Default),
        "json" => Ok(Escape::Json),
        "none" => Ok(Escape::None),
        o => Err(format!(
            "escape `{o}` is unknown; use \"default\", \"json\" or \"none\""
        )),
    }
}

/// Where a site's log lines go.
#[derive(Debug, Clone, PartialEq)]
pub enum LogSink {
    Stdout,
    /// Appended to; opened again on SIGUSR1.
    File(PathBuf),
    /// One RFC 5424 message per line.
    Syslog(SyslogConfig),
    /// One systemd journal entry per line, over the journal's native protocol.
    Journal(JournalConfig),
}

/// Where systemd-journald listens for its native protocol.
pub const JOURNAL_SOCKET: &str = "/run/systemd/journal/socket";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalConfig {
    /// The journal's datagram socket; default [`JOURNAL_SOCKET`].
    pub socket: PathBuf,
    /// `SYSLOG_IDENTIFIER=`; default `weir`.
    pub identifier: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyslogConfig {
    pub to: SyslogTarget,
    /// The facility's number (`local7` is 23, the default).
    pub facility: u8,
    /// The APP-NAME field; default `weir`.
    pub tag: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyslogTarget {
    Udp(SocketAddr),
    /// A datagram socket such as `/dev/log`.
    Unix(PathBuf),
}

/// `udp://HOST:PORT`, `unix:///dev/log`, or a path.
pub fn syslog_target(s: &str) -> Result<SyslogTarget, String> {
    if let Some(a) = s.strip_prefix("udp://") {
        return a.parse().map(SyslogTarget::Udp).map_err(|_| {
            format!("syslog `{s}`: `{a}` is not an address and port (udp://127.0.0.1:514)")
        });
    }
    let p = s.strip_prefix("unix://").unwrap_or(s);
    if p.starts_with('/') {
        return Ok(SyslogTarget::Unix(PathBuf::from(p)));
    }
    Err(format!(
        "syslog `{s}`: use \"udp://HOST:PORT\" or \"unix:///dev/log\""
    ))
}

/// A facility by name (RFC 5424 §6.2.1).
pub fn facility(s: &str) -> Result<u8, String> {
    const NAMED: &[&str] = &[
        "kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron",
        "authpriv", "ftp",
    ];
    if let Some(i) = NAMED.iter().position(|n| *n == s) {
        return Ok(i as u8);
    }
    if let Some(n) = s.strip_prefix("local")
        && let Ok(n) = n.parse::<u8>()
        && n <= 7
    {
        return Ok(16 + n);
    }
    Err(format!(
        "syslog facility `{s}` is unknown; use local0..local7, daemon, user..."
    ))
}

/// Which answers are logged: nginx's `if=`, HAProxy's `dontlog-normal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusCond {
    pub op: CmpOp,
    pub value: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Ge,
    Gt,
    Le,
    Lt,
    Eq,
    Ne,
}

impl StatusCond {
    pub fn holds(&self, status: u16) -> bool {
        let v = self.value;
        match self.op {
            CmpOp::Ge => status >= v,
            CmpOp::Gt => status > v,
            CmpOp::Le => status <= v,
            CmpOp::Lt => status < v,
            CmpOp::Eq => status == v,
            CmpOp::Ne => status != v,
        }
    }
}

/// `status >= 400` (also `>`, `<=`, `<`, `==`, `!=`).
pub fn condition(s: &str) -> Result<StatusCond, String> {
    let err = || format!("if `{s}`: write a condition on the status, e.g. \"status >= 400\"");
    let rest = s
        .trim()
        .strip_prefix("status")
        .ok_or_else(err)?
        .trim_start();
    let (op, n) = [
        (">=", CmpOp::Ge),
        ("<=", CmpOp::Le),
        ("==", CmpOp::Eq),
        ("!=", CmpOp::Ne),
        (">", CmpOp::Gt),
        ("<", CmpOp::Lt),
    ]
    .iter()
    .find_map(|(t, op)| rest.strip_prefix(t).map(|n| (*op, n)))
    .ok_or_else(err)?;
    let value = n.trim().parse::<u16>().map_err(|_| err())?;
    Ok(StatusCond { op, value })
}

/// A site's `access_log`, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct AccessLogConfig {
    pub sink: LogSink,
    pub format: Arc<LogFormat>,
    /// Only answers for which it holds are logged.
    pub condition: Option<StatusCond>,
    /// The share of requests (after `condition`) that are logged; 1 logs all.
    pub sample: f64,
}

/// A site's `request_id`: every request gets an ID in `header`, sent
/// upstream and logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestIdConfig {
    /// Default `X-Request-ID`.
    pub header: HeaderName,
    /// Whether the response carries it too (weir's own error pages always
    /// show it).
    pub response: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_compile_into_segments() {
        let f = LogFormat::template("{{x}} {status} \"{req.header.user-agent}\"", Escape::Json)
            .unwrap();
        let LogFormat::Template { segments, escape } = f else {
            panic!()
        };
        assert_eq!(escape, Escape::Json);
        assert_eq!(
            segments,
            vec![
                Segment::Lit("{x} ".into()),
                Segment::Var(Var::Status),
                Segment::Lit(" \"".into()),
                Segment::Var(Var::ReqHeader(http::header::USER_AGENT)),
                Segment::Lit("\"".into()),
            ]
        );
        assert!(LogFormat::builtin("combined").is_some());
        assert!(LogFormat::builtin("common").is_some());
    }

    #[test]
    fn unknown_variables_suggest_the_nearest() {
        let e = LogFormat::template("{stauts}", Escape::Default).unwrap_err();
        assert_eq!(
            e,
            "unknown log variable `{stauts}`: did you mean `{status}`?"
        );
        let e = variable("req.headers.Host").unwrap_err();
        assert_eq!(
            e,
            "unknown log variable `{req.headers.Host}`: did you mean `{req.header.Host}`?"
        );
        let e = variable("cokie.sid").unwrap_err();
        assert!(e.ends_with("did you mean `{cookie.sid}`?"), "{e}");
        assert!(
            variable("zzzzzzzz")
                .unwrap_err()
                .contains("docs/logging.md")
        );
        assert!(LogFormat::template("{status", Escape::Default).is_err());
        assert!(LogFormat::template("status}", Escape::Default).is_err());
    }

    #[test]
    fn conditions_sinks_and_facilities() {
        let c = condition("status >= 400").unwrap();
        assert!(c.holds(404) && c.holds(400) && !c.holds(399));
        assert!(condition("status!=200").unwrap().holds(201));
        assert!(condition("method == GET").is_err());
        assert_eq!(
            syslog_target("udp://127.0.0.1:514").unwrap(),
            SyslogTarget::Udp("127.0.0.1:514".parse().unwrap())
        );
        assert_eq!(
            syslog_target("unix:///dev/log").unwrap(),
            SyslogTarget::Unix("/dev/log".into())
        );
        assert!(syslog_target("tcp://x").is_err());
        assert_eq!(facility("local7"), Ok(23));
        assert_eq!(facility("daemon"), Ok(3));
        assert!(facility("local9").is_err());
    }
}
