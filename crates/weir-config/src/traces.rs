//! `[traces]`: OpenTelemetry spans exported over OTLP, HTTP/protobuf or gRPC.
//! Owns the settings, their defaults and their mistakes; never connects to
//! the collector nor starts the exporter.

use std::time::Duration;

use serde_spanned::Spanned;

use crate::error::Collector;
use crate::raw::{RawTraces, Value};
use crate::units;

/// How spans reach the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP/HTTP: protobuf bodies POSTed over HTTP/1.1 (port 4318).
    HttpProtobuf,
    /// OTLP/gRPC: `TraceService/Export` over HTTP/2 without TLS (port 4317).
    Grpc,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TracesConfig {
    /// The collector: `http://host:port/v1/traces` (HTTP/protobuf) or
    /// `http://host:port` (gRPC).
    pub endpoint: http::Uri,
    pub protocol: Protocol,
    /// The share of new traces recorded (0 to 1). A client's `traceparent`
    /// decides for its own trace (parent-based sampling).
    pub sample: f64,
    /// The `service.name` resource attribute.
    pub service_name: String,
    /// Most spans in one export request.
    pub batch: usize,
    /// Longest wait before a partial batch is sent.
    pub interval: Duration,
    /// Spans waiting for export per thread at most; past it new spans are
    /// dropped.
    pub queue: usize,
    /// How long one export may take (connect, send, answer).
    pub timeout: Duration,
}

pub(crate) fn validate(
    c: &mut Collector<'_>,
    raw: &Option<Spanned<RawTraces>>,
) -> Option<TracesConfig> {
    let whole = raw.as_ref()?;
    let r = whole.get_ref();
    let protocol = match r.protocol.as_ref().map(|p| (p, p.get_ref().as_str())) {
        None | Some((_, "http/protobuf")) => Protocol::HttpProtobuf,
        Some((_, "grpc")) => Protocol::Grpc,
        Some((p, other)) => {
            c.at(
                p.span(),
                format!("traces.protocol: `{other}` is not one: use \"http/protobuf\" or \"grpc\""),
            );
            Protocol::HttpProtobuf
        }
    };
    let endpoint = match check_endpoint(r.endpoint.get_ref().trim(), protocol) {
        Ok(u) => u,
        Err(m) => {
            c.at(r.endpoint.span(), format!("traces.endpoint: {m}"));
            http::Uri::from_static("http://127.0.0.1:4318/v1/traces")
        }
    };
    let sample = match &r.sample {
        None => 1.0,
        Some(s) if (0.0..=1.0).contains(s.get_ref()) => *s.get_ref(),
        Some(s) => {
            c.at(
                s.span(),
                "traces.sample: a ratio from 0 (none) to 1 (every request), e.g. 0.01",
            );
            1.0
        }
    };
    let service_name = match &r.service_name {
        None => "weir".to_string(),
        Some(n) if !n.get_ref().trim().is_empty() => n.get_ref().trim().to_string(),
        Some(n) => {
            c.at(n.span(), "traces.service_name: must not be empty");
            "weir".to_string()
        }
    };
    let mut count = |v: &Option<Spanned<u64>>, key: &str, default: u64, max: u64| match v {
        None => default as usize,
        Some(n) if (1..=max).contains(n.get_ref()) => *n.get_ref() as usize,
        Some(n) => {
            c.at(n.span(), format!("traces.{key}: use 1 to {max}"));
            default as usize
        }
    };
    let batch = count(&r.batch, "batch", 512, 65_536);
    let queue = count(&r.queue, "queue", 4096, 1 << 20);
    let mut duration = |v: &Option<Spanned<Value>>, key: &str, default: Duration| match v {
        None => default,
        Some(d) => match units::parse_duration(d.get_ref()) {
            Ok(t) if t >= Duration::from_millis(10) && t <= Duration::from_secs(300) => t,
            Ok(_) => {
                c.at(d.span(), format!("traces.{key}: use 10ms to 300s"));
                default
            }
            Err(m) => {
                c.at(d.span(), format!("traces.{key}: {m}"));
                default
            }
        },
    };
    let interval = duration(&r.interval, "interval", Duration::from_secs(1));
    let timeout = duration(&r.timeout, "timeout", Duration::from_secs(5));
    if queue < batch {
        c.at(
            whole.span(),
            format!("traces: `queue` ({queue}) must hold at least one `batch` ({batch})"),
        );
    }
    Some(TracesConfig {
        endpoint,
        protocol,
        sample,
        service_name,
        batch,
        interval,
        queue,
        timeout,
    })
}

/// An `http://` URL with a host: with a path for HTTP/protobuf, without
/// one for gRPC (whose path is the service's).
fn check_endpoint(s: &str, protocol: Protocol) -> Result<http::Uri, String> {
    let u: http::Uri = s.parse().map_err(|e| {
        format!("`{s}` is not a URL ({e}); e.g. \"http://127.0.0.1:4318/v1/traces\"")
    })?;
    match u.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(
                "only `http://` is supported: send to a collector (or agent) on this host or a trusted network"
                    .into(),
            );
        }
        _ => {
            return Err(format!(
                "`{s}` needs `http://` and a host, e.g. \"http://127.0.0.1:4318/v1/traces\""
            ));
        }
    }
    if u.host().is_none_or(str::is_empty) {
        return Err(format!("`{s}` has no host"));
    }
    let no_path = u.path() == "/" || u.path().is_empty();
    if protocol == Protocol::Grpc {
        return if no_path {
            Ok(u)
        } else {
            Err(format!(
                "`{s}` has a path: gRPC collectors take traces at their address alone, e.g. \"http://127.0.0.1:4317\""
            ))
        };
    }
    if no_path {
        return Err(format!(
            "`{s}` has no path: OTLP/HTTP collectors take traces at `/v1/traces`"
        ));
    }
    Ok(u)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(src: &str) -> Result<crate::Config, crate::ConfigErrors> {
        let src = format!("[site.\"a.test\"]\nroot = \"/srv\"\ntraces = false\n{src}");
        crate::load_str("t.toml", &src, std::path::Path::new("/srv/conf"))
    }

    #[test]
    fn defaults_and_every_key() {
        let cfg = parse_str("[traces]\nendpoint = \"http://127.0.0.1:4318/v1/traces\"\n").unwrap();
        let t = cfg.traces.unwrap();
        assert_eq!(t.endpoint, "http://127.0.0.1:4318/v1/traces");
        assert_eq!((t.sample, t.service_name.as_str()), (1.0, "weir"));
        assert_eq!((t.batch, t.queue), (512, 4096));
        assert_eq!(t.interval, Duration::from_secs(1));
        assert_eq!(t.timeout, Duration::from_secs(5));
        assert_eq!(t.protocol, Protocol::HttpProtobuf);
        assert!(!cfg.sites[0].traces);
        let cfg = parse_str(
            "[traces]\nendpoint = \"http://c:4318/v1/traces\"\nsample = 0.01\nservice_name = \"edge\"\n\
             batch = 100\nqueue = 1000\ninterval = \"200ms\"\ntimeout = \"2s\"\n",
        )
        .unwrap();
        let t = cfg.traces.unwrap();
        assert_eq!((t.sample, t.service_name.as_str()), (0.01, "edge"));
        assert_eq!((t.batch, t.queue), (100, 1000));
        assert_eq!(t.interval, Duration::from_millis(200));
        assert_eq!(t.timeout, Duration::from_secs(2));
        assert!(parse_str("").unwrap().traces.is_none());
        let cfg =
            parse_str("[traces]\nendpoint = \"http://c:4317\"\nprotocol = \"grpc\"\n").unwrap();
        let t = cfg.traces.unwrap();
        assert_eq!(
            (t.protocol, t.endpoint.port_u16()),
            (Protocol::Grpc, Some(4317))
        );
    }

    #[test]
    fn mistakes_are_refused_with_their_line() {
        let errs = |s: &str| parse_str(s).unwrap_err().to_string();
        let e = errs("[traces]\nendpoint = \"http://c/v1/traces\"\nsample = 2\n");
        assert!(
            e.contains("t.toml:6:") && e.contains("traces.sample"),
            "{e}"
        );
        let e = errs("[traces]\nendpoint = \"https://c/v1/traces\"\n");
        assert!(
            e.contains("traces.endpoint") && e.contains("http://"),
            "{e}"
        );
        let e = errs("[traces]\nendpoint = \"http://c/v1/traces\"\nbatch = 100\nqueue = 10\n");
        assert!(e.contains("must hold at least one `batch`"), "{e}");
        let e = errs("[traces]\nendpoint = \"http://c/v1/traces\"\ninterval = \"1h\"\n");
        assert!(e.contains("traces.interval"), "{e}");
        let e = errs("[traces]\nendpoint = \"http://c/v1/traces\"\nsampel = 0.1\n");
        assert!(e.contains("sample"), "{e}");
        let e = errs("[traces]\nsample = 0.1\n");
        assert!(e.contains("endpoint"), "{e}");
        let e = errs("[traces]\nendpoint = \"http://c:4317\"\nprotocol = \"grpc-web\"\n");
        assert!(
            e.contains("traces.protocol") && e.contains("\"grpc\""),
            "{e}"
        );
    }

    #[test]
    fn endpoints_are_http_urls_with_a_path_unless_grpc() {
        const H: Protocol = Protocol::HttpProtobuf;
        const G: Protocol = Protocol::Grpc;
        assert!(check_endpoint("http://127.0.0.1:4318/v1/traces", H).is_ok());
        assert!(check_endpoint("http://collector/v1/traces", H).is_ok());
        assert!(
            check_endpoint("https://c:4318/v1/traces", H)
                .unwrap_err()
                .contains("http://")
        );
        assert!(check_endpoint("127.0.0.1:4318", H).is_err());
        assert!(
            check_endpoint("http://127.0.0.1:4318", H)
                .unwrap_err()
                .contains("/v1/traces")
        );
        assert!(check_endpoint("grpc://c:4317/x", H).is_err());
        assert!(check_endpoint("http://127.0.0.1:4317", G).is_ok());
        assert!(
            check_endpoint("http://127.0.0.1:4317/v1/traces", G)
                .unwrap_err()
                .contains("gRPC")
        );
    }
}
