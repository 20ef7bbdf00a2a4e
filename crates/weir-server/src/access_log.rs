//! Per-site access logs (combined log format or JSON lines), off by default.
//!
//! The request path formats a line by hand into one buffer (no JSON value
//! tree, the time formatted once a second per thread) and hands it to a
//! channel; one writer thread per log file does the blocking writes. The
//! writer wakes for the first line after a quiet spell, then gathers for
//! `GATHER` before it writes, so under load a worker never wakes it per
//! line and lines go out in one write per batch (nginx's `buffer=` and
//! `flush=` do the same in the worker itself). Never writes to the file
//! from a worker thread.
//!
//! [`reopen`] (SIGUSR1, after log rotation) has every writer open its path
//! again before its next batch, as nginx does on USR1.

use std::fmt::Write as _;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use weir_config::{AccessLogConfig, AccessLogFormat};
use weir_http::date;

/// How long the writer gathers lines after the first one of a batch: at
/// most this late in the file, and one wake-up and one write per batch.
const GATHER: Duration = Duration::from_millis(20);

/// Bumped by [`reopen`]; each writer compares it with the one it opened at.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// Makes every access log file open its path again before it next writes
/// (a rotated file is left to the rotation; the lines after go to the new one).
pub fn reopen() {
    GENERATION.fetch_add(1, Ordering::Relaxed);
}

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
        let mut out = Out::open(cfg.path.clone())?;
        let (tx, rx) = mpsc::channel::<Vec<u8>>();
        std::thread::Builder::new()
            .name("weir-access-log".into())
            .spawn(move || {
                // Parked in `recv` only while the channel is empty, so a
                // worker's send wakes this thread once per batch at most.
                while let Ok(line) = rx.recv() {
                    out.reopen_if_asked();
                    let _ = out.w.write_all(&line);
                    loop {
                        std::thread::sleep(GATHER);
                        let mut more = false;
                        while let Ok(line) = rx.try_recv() {
                            let _ = out.w.write_all(&line);
                            more = true;
                        }
                        if !more {
                            break;
                        }
                    }
                    let _ = out.w.flush();
                }
                let _ = out.w.flush();
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

/// A writer's destination: standard output, or a file it may open again.
struct Out {
    path: Option<PathBuf>,
    generation: u64,
    w: std::io::BufWriter<Box<dyn Write + Send>>,
}

impl Out {
    fn open(path: Option<PathBuf>) -> std::io::Result<Out> {
        let generation = GENERATION.load(Ordering::Relaxed);
        let file: Box<dyn Write + Send> = match &path {
            None => Box::new(std::io::stdout()),
            Some(p) => Box::new(open_append(p)?),
        };
        Ok(Out {
            path,
            generation,
            w: std::io::BufWriter::with_capacity(64 * 1024, file),
        })
    }

    /// Opens the path again if [`reopen`] was called since it last did;
    /// a file that cannot be opened leaves the old one in use (and says so).
    fn reopen_if_asked(&mut self) {
        let now = GENERATION.load(Ordering::Relaxed);
        if now == self.generation {
            return;
        }
        self.generation = now;
        let Some(p) = &self.path else { return };
        match open_append(p) {
            Ok(f) => {
                let _ = self.w.flush();
                self.w = std::io::BufWriter::with_capacity(64 * 1024, Box::new(f));
                tracing::info!("access log {} reopened", p.display());
            }
            Err(e) => tracing::warn!(
                "access log {}: cannot reopen ({e}); writing on to the file already open",
                p.display()
            ),
        }
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
    let mut now = String::with_capacity(26);
    date::push_clf(&mut now);
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
    let mut out = String::with_capacity(256);
    out.push_str("{\"time\":\"");
    date::push_http(&mut out);
    let _ = write!(out, "\",\"remote_addr\":\"{}\",\"host\":", e.peer.ip());
    json_str(&mut out, Some(e.host));
    out.push_str(",\"method\":");
    json_str(&mut out, Some(e.method));
    out.push_str(",\"uri\":");
    json_str(&mut out, Some(e.target));
    let _ = write!(
        out,
        ",\"protocol\":\"{}\",\"status\":{},\"bytes\":",
        version(e.version),
        e.status
    );
    match e.bytes {
        Some(b) => {
            let _ = write!(out, "{b}");
        }
        None => out.push_str("null"),
    }
    out.push_str(",\"referer\":");
    json_str(&mut out, e.referer);
    out.push_str(",\"user_agent\":");
    json_str(&mut out, e.user_agent);
    let _ = writeln!(
        out,
        ",\"duration_ms\":{}}}",
        e.duration.as_secs_f64() * 1000.0
    );
    out.into_bytes()
}

/// `s` as a JSON string (`null` for `None`): quotes, backslashes and
/// control characters escaped.
fn json_str(out: &mut String, s: Option<&str>) {
    let Some(s) = s else {
        out.push_str("null");
        return;
    };
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
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
        assert_eq!(j["bytes"], 12);
        assert_eq!(j["referer"], serde_json::Value::Null);
        assert_eq!(j["user_agent"], "curl/8");
        assert_eq!(j["remote_addr"], "10.0.0.1");
        assert_eq!(j["duration_ms"], 3.0);
        assert!(j["time"].as_str().unwrap().ends_with(" GMT"));
    }

    /// Whatever a client puts in a field, each JSON line parses and gives
    /// the field back as it came.
    #[test]
    fn json_lines_escape_what_clients_send() {
        for nasty in [
            "\"",
            "\\",
            "a\nb",
            "\u{1}\u{1f}",
            "é ☃",
            "}{\"x\":1",
            "\t\r",
        ] {
            let e = Entry {
                peer: "[::1]:1".parse().unwrap(),
                method: "GET",
                target: nasty,
                version: http::Version::HTTP_2,
                status: 200,
                bytes: None,
                referer: Some(nasty),
                user_agent: None,
                host: nasty,
                duration: Duration::from_micros(1500),
            };
            let line = json(&e);
            assert_eq!(line.last(), Some(&b'\n'));
            assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1);
            let j: serde_json::Value = serde_json::from_slice(&line).unwrap();
            assert_eq!(j["uri"], nasty);
            assert_eq!(j["referer"], nasty);
            assert_eq!(j["host"], nasty);
            assert_eq!(j["bytes"], serde_json::Value::Null);
            assert_eq!(j["protocol"], "HTTP/2.0");
            assert_eq!(j["remote_addr"], "::1");
        }
    }
}
