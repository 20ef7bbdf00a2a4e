//! The run folder's human outputs: a Markdown table per scenario (the seed
//! tables' columns plus weir's ratio to each competitor), an SVG chart of
//! req/s and p99 per server, and a README tying them together.

use std::fmt::Write as _;

use super::scenarios::Scenario;
use super::{CompareConfig, Row, Summary};

/// Columns of every scenario table, in order (tests check them).
pub const COLUMNS: [&str; 15] = [
    "case",
    "server",
    "req/s (median)",
    "min–max",
    "p50 ms",
    "p99 ms",
    "p99 CO-corrected ms",
    "2xx/3xx",
    "non-2xx",
    "client errors",
    "server CPU cores",
    "idle RSS MiB",
    "peak RSS MiB",
    "generator CPU",
    "weir ÷ this",
];

fn weir_ratio(rows: &[Row], r: &Row) -> String {
    let weir = rows
        .iter()
        .find(|w| w.case == r.case && w.server == "weir" && w.status == "ok");
    match weir {
        Some(w) if r.status == "ok" && r.rps_median > 0.0 => {
            if r.server == "weir" {
                "1.00".into()
            } else {
                format!("{:.2}", w.rps_median / r.rps_median)
            }
        }
        _ => "n/a".into(),
    }
}

/// The Markdown table of one scenario.
pub fn markdown(s: Scenario, rows: &[Row], cfg: &CompareConfig) -> String {
    let mut o = format!("## Scenario `{}`\n\n{}\n\n", s.name(), s.describe());
    let _ = writeln!(
        o,
        "Median of {} repeats of {:.1} s after {:.1} s warm-up (fixed-count cases: each repeat runs its count); \
         spread is min–max. Latency p99 is measured from each request's send; the corrected column adds \
         coordinated-omission correction. Requests/s count 2xx/3xx only.\n",
        cfg.repeats,
        cfg.duration.as_secs_f64(),
        cfg.warmup.as_secs_f64()
    );
    let _ = writeln!(o, "| {} |", COLUMNS.join(" | "));
    let _ = writeln!(o, "|{}", "---|".repeat(COLUMNS.len()));
    for r in rows {
        if r.status != "ok" {
            let _ = writeln!(
                o,
                "| {} | {} | {} |{}",
                r.case,
                r.server,
                r.status.replace('|', "/"),
                " |".repeat(COLUMNS.len() - 3)
            );
            continue;
        }
        let cpu = match r.backend_cpu {
            Some(b) => format!("{:.2} (+{:.2} backend)", r.server_cpu, b),
            None => format!("{:.2}", r.server_cpu),
        };
        let gen_cpu = format!(
            "{:.2}{}",
            r.generator_cpu,
            if r.generator_cpu_bound {
                " (CPU-bound)"
            } else {
                ""
            }
        );
        let _ = writeln!(
            o,
            "| {} | {} | {:.0} | {:.0}–{:.0} | {:.2} | {:.2} | {:.2} | {} | {} | {} | {} | {:.1} | {:.1} | {} | {} |",
            r.case,
            r.server,
            r.rps_median,
            r.rps_min,
            r.rps_max,
            r.p50_ms,
            r.p99_ms,
            r.p99_corrected_ms,
            r.ok_responses,
            r.non_2xx,
            r.client_errors,
            cpu,
            r.rss_idle_mib,
            r.rss_peak_mib,
            gen_cpu,
            weir_ratio(rows, r)
        );
    }
    o.push('\n');
    o
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// An SVG with two bar panels (req/s, p99 ms), one bar per case and server.
pub fn svg(s: Scenario, rows: &[Row]) -> String {
    let ok: Vec<&Row> = rows.iter().filter(|r| r.status == "ok").collect();
    let bar_h = 16.0;
    let label_w = 230.0;
    let panel_w = 360.0;
    let top = 50.0;
    let height = top + (ok.len().max(1) as f64) * (bar_h + 4.0) + 40.0;
    let width = label_w + 2.0 * panel_w + 80.0;
    let max_rps = ok.iter().map(|r| r.rps_max).fold(1.0, f64::max);
    let max_p99 = ok.iter().map(|r| r.p99_ms).fold(0.001, f64::max);
    let mut o = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"10\" y=\"20\" font-size=\"15\" font-weight=\"bold\">weir-bench compare: {} (median; whiskers = min–max)</text>\n\
         <text x=\"{}\" y=\"42\" font-weight=\"bold\">requests/s (higher is better)</text>\n\
         <text x=\"{}\" y=\"42\" font-weight=\"bold\">p99 latency ms (lower is better)</text>\n",
        s.name(),
        label_w,
        label_w + panel_w + 40.0
    );
    for (i, r) in ok.iter().enumerate() {
        let y = top + i as f64 * (bar_h + 4.0);
        let color = if r.server == "weir" {
            "#d9480f"
        } else {
            "#1c7ed6"
        };
        let w1 = r.rps_median / max_rps * (panel_w - 70.0);
        let (lo, hi) = (
            r.rps_min / max_rps * (panel_w - 70.0),
            r.rps_max / max_rps * (panel_w - 70.0),
        );
        let w2 = r.p99_ms / max_p99 * (panel_w - 70.0);
        let x2 = label_w + panel_w + 40.0;
        let _ = writeln!(
            o,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{} · {}</text>\n\
             <rect x=\"{label_w}\" y=\"{y}\" width=\"{w1:.1}\" height=\"{bar_h}\" fill=\"{color}\"/>\n\
             <line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"black\"/>\n\
             <text x=\"{:.1}\" y=\"{}\">{:.0}</text>\n\
             <rect x=\"{x2}\" y=\"{y}\" width=\"{w2:.1}\" height=\"{bar_h}\" fill=\"{color}\" opacity=\"0.7\"/>\n\
             <text x=\"{:.1}\" y=\"{}\">{:.2}</text>",
            label_w - 6.0,
            y + 12.0,
            esc(&r.case),
            esc(&r.server),
            label_w + lo,
            label_w + hi,
            y + bar_h / 2.0,
            y + bar_h / 2.0,
            label_w + w1.max(hi) + 4.0,
            y + 12.0,
            r.rps_median,
            x2 + w2 + 4.0,
            y + 12.0,
            r.p99_ms
        );
    }
    if ok.is_empty() {
        let _ = writeln!(
            o,
            "<text x=\"10\" y=\"{}\">no server was measured in this scenario</text>",
            top + 12.0
        );
    }
    o.push_str("</svg>\n");
    o
}

/// The run folder's README: machine, versions, command, links.
pub fn readme(s: &Summary, cfg: &CompareConfig) -> String {
    let mut o = format!(
        "# weir-bench compare run {}\n\nCommand: `{}`\n\n",
        s.run, s.command
    );
    let _ = writeln!(
        o,
        "Machine: {} CPUs, generator {}; {} repeats of {:.1} s after {:.1} s warm-up; servers with {} workers/threads.\n",
        s.cpus,
        if s.pinned {
            "pinned to CPU 0, servers to CPU 1"
        } else {
            "not pinned (shares the CPUs with the server)"
        },
        s.repeats,
        s.duration_s,
        s.warmup_s,
        cfg.workers
    );
    o.push_str("| server | version |\n|---|---|\n");
    for (n, v) in &s.versions {
        let _ = writeln!(o, "| {n} | {} |", v.replace('|', "/"));
    }
    o.push_str("\nEvery server's exact config is under `configs/<scenario>/<case>/<server>/`; raw JSON of each repeat under `raw/`.\n\n");
    for sc in &cfg.scenarios {
        let _ = writeln!(o, "- [{0}]({0}.md) · ![{0}]({0}.svg)", sc.name());
    }
    o
}
