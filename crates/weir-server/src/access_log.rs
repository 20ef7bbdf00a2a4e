//! Per-site access logs (combined log format or JSON lines), off by default.
//!
//! The request path only formats a line and hands it to a channel; one
//! writer thread per log file does the blocking writes, batching them through
//! a `BufWriter` and flushing when the channel runs dry.

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, SystemTime};

use weir_config::{AccessLogConfig, AccessLogFormat};

/// What is logged about one request.
pub struct Entry<'a> {
    pub peer: SocketAddr,
    pub method: &'a str,
    pub target: &'a str,
    pub version: http::Version,
    pub status: u16,
    pub bytes: Option<u64>,
    pub referer: Option<&'a str>,
    pub user_agent: Option<&'a str>,
    pub host: &'a str,
    pub duration: Duration,
}

pub struct AccessLog {
    format: AccessLogFormat,
    tx: mpsc::Sender<Vec<u8>>,
}

impl AccessLog {
    pub fn open(cfg: &AccessLogConfig) -> std::io::Result<AccessLog> {
        let out: Box<dyn Write + Send> = match &cfg.path {
            None => Box::new(std::io::stdout()),
            Some(p) => Box::new(open_append(p)?),
        };
        let (tx, rx) = mpsc::channel::<Vec<u8>>();
        std::thread::Builder::new()
            .name("weir-access-log".into())
            .spawn(move || {
                let mut w = std::io::BufWriter::with_capacity(64 * 1024, out);
                while let Ok(line) = rx.recv() {
                    let _ = w.write_all(&line);
                    while let Ok(line) = rx.try_recv() {
                        let _ = w.write_all(&line);
                    }
                    let _ = w.flush();
                }
                let _ = w.flush();
            })?;
        Ok(AccessLog {
            format: cfg.format,
            tx,
        })
    }

    pub fn log(&self, e: &Entry<'_>) {
        let line = match self.format {
            AccessLogFormat::Combined => combined(e),
            AccessLogFormat::Json => json(e),
        };
        let _ = self.tx.send(line);
    }
}

fn open_append(p: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(p)
}

fn version(v: http::Version) -> &'static str {
    match v {
        http::Version::HTTP_09 => "HTTP/0.9",
        http::Version::HTTP_10 => "HTTP/1.0",
        http::Version::HTTP_2 => "HTTP/2.0",
        http::Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/1.1",
    }
}

/// `127.0.0.1 - - [21/Nov/2026:15:03:00 +0000] "GET / HTTP/1.1" 200 164 "-" "curl/7.88.1"`
fn combined(e: &Entry<'_>) -> Vec<u8> {
    let now = clf_time(SystemTime::now());
    let esc = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
    format!(
        "{} - - [{}] \"{} {} {}\" {} {} \"{}\" \"{}\"\n",
        e.peer.ip(),
        now,
        e.method,
        esc(e.target),
        version(e.version),
        e.status,
        e.bytes.map(|b| b.to_string()).unwrap_or_else(|| "-".into()),
        esc(e.referer.unwrap_or("-")),
        esc(e.user_agent.unwrap_or("-")),
    )
    .into_bytes()
}

fn json(e: &Entry<'_>) -> Vec<u8> {
    let v = serde_json::json!({
        "time": httpdate::fmt_http_date(SystemTime::now()),
        "remote_addr": e.peer.ip().to_string(),
        "host": e.host,
        "method": e.method,
        "uri": e.target,
        "protocol": version(e.version),
        "status": e.status,
        "bytes": e.bytes,
        "referer": e.referer,
        "user_agent": e.user_agent,
        "duration_ms": e.duration.as_secs_f64() * 1000.0,
    });
    let mut out = serde_json::to_vec(&v).unwrap_or_default();
    out.push(b'\n');
    out
}

/// `21/Nov/2026:15:03:00 +0000`, the combined log format's time, in UTC.
fn clf_time(t: SystemTime) -> String {
    // httpdate gives "Sat, 21 Nov 2026 15:03:00 GMT"; rearrange its fields.
    let s = httpdate::fmt_http_date(t);
    let p: Vec<&str> = s.split(' ').collect();
    if p.len() == 6 {
        format!("{}/{}/{}:{} +0000", p[1], p[2], p[3], p[4])
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combined_line_has_every_field() {
        let e = Entry {
            peer: "10.0.0.1:5555".parse().unwrap(),
            method: "GET",
            target: "/a\"b",
            version: http::Version::HTTP_11,
            status: 404,
            bytes: Some(12),
            referer: None,
            user_agent: Some("curl/8"),
            host: "x",
            duration: Duration::from_millis(3),
        };
        let line = String::from_utf8(combined(&e)).unwrap();
        assert!(line.starts_with("10.0.0.1 - - ["), "{line}");
        assert!(
            line.ends_with("\"GET /a\\\"b HTTP/1.1\" 404 12 \"-\" \"curl/8\"\n"),
            "{line}"
        );
        let j: serde_json::Value = serde_json::from_slice(&json(&e)).unwrap();
        assert_eq!(j["status"], 404);
        assert_eq!(j["uri"], "/a\"b");
    }
}
