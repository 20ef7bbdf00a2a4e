//! The run folder's human outputs: a Markdown table per scenario (the seed
//! tables' columns plus weir's ratio to each competitor; `startup` and `idle`
//! have their own columns), an SVG chart per scenario, a README tying
//! them together, and `report.html`, all of it on one page for a browser.

use std::fmt::Write as _;

use super::idle::IdleRow;
use super::scenarios::Scenario;
use super::startup::StartupRow;
use super::{CompareConfig, Row, Summary};

/// Columns of every scenario table, in order (tests check them).
pub const COLUMNS: [&str; 21] = [
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
    "unanswered at end",
    "server CPU cores",
    "idle PSS MiB",
    "peak PSS MiB",
    "idle RSS MiB",
    "peak RSS MiB",
    "generator CPU",
    "CPU stolen % (median, max)",
    "weir ÷ this",
    "weir ÷ this, per round (median)",
    "per-round median: interval (confidence)",
];

/// weir's measured row for `r`'s scenario and case, if it has one.
fn weir_row<'a>(rows: &'a [Row], r: &Row) -> Option<&'a Row> {
    rows.iter().find(|w| {
        w.scenario == r.scenario && w.case == r.case && w.server == "weir" && w.status == "ok"
    })
}

fn weir_ratio(rows: &[Row], r: &Row) -> String {
    match weir_row(rows, r) {
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

/// weir's row for `r`, and weir's req/s divided by `r`'s, round by round
/// (`None` if a round of either is missing or `r` is weir itself).
pub(super) fn round_ratios<'a>(rows: &'a [Row], r: &Row) -> Option<(&'a Row, Vec<f64>)> {
    let w = weir_row(rows, r)?;
    if r.status != "ok"
        || r.server == "weir"
        || w.rps_by_round.is_empty()
        || w.rps_by_round.len() != r.rps_by_round.len()
        || r.rps_by_round.iter().any(|&x| x <= 0.0)
    {
        return None;
    }
    let ratios = w
        .rps_by_round
        .iter()
        .zip(&r.rps_by_round)
        .map(|(a, b)| a / b)
        .collect();
    Some((w, ratios))
}

/// The median over rounds of weir's req/s divided by `r`'s in the same
/// round. Both ran within a minute of each other, so drift of the machine
/// (often ±15 % between minutes here) cancels out of each ratio, which the
/// ratio of the two medians does not guarantee.
fn weir_round_ratio(rows: &[Row], r: &Row) -> String {
    match round_ratios(rows, r) {
        Some((_, ratios)) => format!("{:.2}", super::median(ratios)),
        None if r.server == "weir" && weir_row(rows, r).is_some() => "1.00".into(),
        None => "n/a".into(),
    }
}

/// weir against one competitor in one case, as summary.json records it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Ratio {
    pub scenario: String,
    pub case: String,
    /// The competitor.
    pub server: String,
    /// weir's median req/s over the competitor's.
    pub of_medians: f64,
    /// The median of the rounds' ratios.
    pub per_round: f64,
    /// `[low, high, confidence]` for `per_round` ([`median_interval`] at
    /// 90 %); absent with fewer than 5 rounds.
    pub interval: Option<[f64; 3]>,
}

/// Every competitor's [`Ratio`], for rows where both it and weir measured
/// every round.
pub fn ratios(rows: &[Row]) -> Vec<Ratio> {
    rows.iter()
        .filter_map(|r| {
            let (w, v) = round_ratios(rows, r)?;
            Some(Ratio {
                scenario: r.scenario.clone(),
                case: r.case.clone(),
                server: r.server.clone(),
                of_medians: w.rps_median / r.rps_median,
                per_round: super::median(v.clone()),
                interval: median_interval(v, 0.90).map(|(lo, hi, c)| [lo, hi, c]),
            })
        })
        .collect()
}

/// How sure the per-round median is: the interval between two of the
/// rounds' ratios that holds the true median with at least 90 % confidence
/// (see [`median_interval`]), e.g. `1.09–1.13 (96 %)`.
fn weir_round_interval(rows: &[Row], r: &Row) -> String {
    match round_ratios(rows, r).and_then(|(_, v)| median_interval(v, 0.90)) {
        Some((lo, hi, conf)) => format!("{lo:.2}–{hi:.2} ({:.0} %)", conf * 100.0),
        None => "n/a".into(),
    }
}

/// A distribution-free confidence interval for the median of `v`: the
/// `j`th smallest and `j`th largest values, with the largest `j` whose
/// confidence, `1 − 2·P(Binomial(n, ½) < j)`, is at least `level` (each
/// sample falls below the true median with probability ½, whatever the
/// distribution). Returns `(low, high, confidence)`, or `None` when even
/// the smallest and largest values are not enough (fewer than 5 samples
/// for 90 %). Exact, and the same on every run: no resampling.
pub(super) fn median_interval(mut v: Vec<f64>, level: f64) -> Option<(f64, f64, f64)> {
    let n = v.len();
    if n == 0 {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    // below[k] = P(Binomial(n, 1/2) <= k), summing the terms C(n, k) / 2^n
    // from their logarithms (2^-n alone underflows past n = 1,074).
    let mut ln_term = n as f64 * 0.5f64.ln();
    let mut below = Vec::with_capacity(n);
    let mut sum = 0.0;
    for k in 0..n {
        sum += ln_term.exp();
        below.push(sum);
        ln_term += ((n - k) as f64 / (k + 1) as f64).ln();
    }
    let conf = |j: usize| 1.0 - 2.0 * below[j - 1];
    let j = (1..=n.div_ceil(2))
        .take_while(|&j| conf(j) >= level - 1e-12)
        .last()?;
    Some((v[j - 1], v[n - j], conf(j)))
}

/// The Markdown table of one scenario.
pub fn markdown(s: Scenario, rows: &[Row], cfg: &CompareConfig) -> String {
    let mut o = format!("## Scenario `{}`\n\n{}\n\n", s.name(), s.describe());
    let first = super::scenarios::cases(s, cfg.quick).into_iter().next();
    let measured = first
        .as_ref()
        .map_or(cfg.duration, |c| c.measured_for(cfg.duration));
    let warmup = first
        .as_ref()
        .map_or(cfg.warmup, |c| c.warmed_for(cfg.warmup));
    let _ = writeln!(o, "{}\n", mode_line(cfg));
    let _ = writeln!(
        o,
        "Median of {} repeats of {:.1} s after {:.1} s warm-up (fixed-count cases: each repeat runs its count), \
         run in rounds: each round starts and measures every server once, so drift of the machine \
         over minutes falls on all of them alike, in an order that changes from round to round (a Williams design: \
         each server runs in each place, and right after each other server, equally often); spread is min–max. Latency p99 is measured from each request's send; the corrected column adds \
         coordinated-omission correction. Requests/s count 2xx/3xx only. CPU stolen is the share of the \
         machine's CPU time a hypervisor gave to other guests during the measured seconds (0 on bare metal): \
         repeats with much stolen time ran slow for reasons outside the servers, so a round in which it passed {:.0} % \
         for any server is measured again, every server of it, at most {} times. The per-round column pairs each round's \
         repeats (weir's and this server's, measured a minute apart at most) and gives the median of those ratios; \
         the last column, two of those ratios that hold the true median between them with the confidence shown \
         (at least 90 %, from the order of the rounds' ratios alone, with no assumption about their distribution; \
         it needs 5 rounds): a target inside the interval is not told apart from weir's ratio by this run. \
         Memory is PSS summed over the server's processes (shared pages counted once), RSS beside it.\n",
        cfg.repeats,
        measured.as_secs_f64(),
        warmup.as_secs_f64(),
        cfg.max_stolen_pct,
        cfg.stolen_retries
    );
    if let Some(a) = &cfg.weir_accept {
        let _ = writeln!(
            o,
            "weir ran with `server.accept = \"{a}\"` (`--weir-accept`), not its default.\n"
        );
    }
    if let Some(k) = &cfg.weir_site_keys {
        let _ = writeln!(
            o,
            "weir's site had these keys added (`--weir-site-keys`); weir-b's did not:\n\n```toml\n{k}\n```\n"
        );
    }
    if let Some(k) = &cfg.weir_b_site_keys {
        let _ = writeln!(
            o,
            "weir-b's site had these keys added (`--weir-b-site-keys`):\n\n```toml\n{k}\n```\n"
        );
    }
    if let Some(k) = &cfg.weir_sections {
        let _ = writeln!(
            o,
            "weir's config had these sections added (`--weir-sections`); weir-b's did not:\n\n```toml\n{k}\n```\n"
        );
    }
    if let Some(a) = &cfg.weir_b_accept {
        let _ = writeln!(
            o,
            "weir-b ran with `server.accept = \"{a}\"` (`--weir-b-accept`).\n"
        );
    }
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
            "| {} | {} | {:.0} | {:.0}–{:.0} | {:.2} | {:.2} | {:.2} | {} | {} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {} | {:.1} ({:.1}) | {} | {} | {} |",
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
            r.unanswered,
            cpu,
            r.pss_idle_mib,
            r.pss_peak_mib,
            r.rss_idle_mib,
            r.rss_peak_mib,
            gen_cpu,
            r.stolen_pct,
            r.stolen_pct_max,
            weir_ratio(rows, r),
            weir_round_ratio(rows, r),
            weir_round_interval(rows, r)
        );
    }
    o.push('\n');
    if s.caches() || !s.targets().is_empty() {
        o.push_str(&cache_notes(s, rows));
    }
    if s == Scenario::App {
        o.push_str(&clean_runs(rows));
    }
    if s == Scenario::Compress {
        o.push_str(&bytes_per_response(rows));
    }
    if matches!(s, Scenario::Seed001 | Scenario::Seed004) {
        o.push_str(&seed_table(rows));
    }
    let mut cases: Vec<&str> = rows.iter().map(|r| r.case.as_str()).collect();
    cases.dedup();
    for case in cases {
        let of_case = || {
            rows.iter()
                .filter(move |r| r.case == case && r.status == "ok")
        };
        let again = of_case().map(|r| r.rounds_remeasured).max().unwrap_or(0);
        if again > 0 {
            let _ = writeln!(
                o,
                "`{case}`: {again} round(s) measured again for stolen CPU; the discarded repeats are in `raw/` as `*-stolen-*.json`.\n"
            );
        }
        let worst = of_case().map(|r| r.stolen_pct_max).fold(0.0, f64::max);
        if worst > cfg.max_stolen_pct {
            let _ = writeln!(
                o,
                "**`{case}` ran on a noisy machine**: the hypervisor still stole up to {worst:.1} % of the CPU in a kept repeat (limit {:.0} %); its ratios say more about the machine than about the servers.\n",
                cfg.max_stolen_pct
            );
        }
    }
    o
}

/// Below a seed scenario's table: the figures its seed publishes, in its
/// columns, so a reader can hold them against the seed's own table.
pub fn seed_table(rows: &[Row]) -> String {
    let mut o = String::from(
        "In the seed's columns (requests/s and mean time per request: medians over the repeats; longest \
         request: the longest of any repeat; failed: non-2xx answers and client errors, the worst repeat's):\n\n\
         | case | server | requests/s | mean ms | longest ms | failed |\n|---|---|---|---|---|---|\n",
    );
    for r in rows.iter().filter(|r| r.status == "ok") {
        let _ = writeln!(
            o,
            "| {} | {} | {:.0} | {:.2} | {:.1} | {} |",
            r.case,
            r.server,
            r.rps_median,
            r.mean_ms,
            r.max_ms,
            r.non_2xx_max + r.client_errors_max
        );
    }
    o.push('\n');
    o
}

/// Below the `compress` table: what each server sent per response, so a
/// faster row that compressed less shows it.
fn bytes_per_response(rows: &[Row]) -> String {
    let sizes: Vec<String> = rows
        .iter()
        .filter(|r| r.status == "ok")
        .map(|r| format!("{} {:.0}", r.server, r.bytes_per_response))
        .collect();
    format!(
        "Bytes per response (median; head, compressed body and chunk framing, as the generator received them): \
         {}.\n\n",
        sizes.join(", ")
    )
}

/// Columns of the clean-run table, in order (tests check them).
pub const CLEAN_RUN_COLUMNS: [&str; 5] = [
    "case",
    "server",
    "non-2xx, most in a repeat",
    "client errors, most in a repeat",
    "clean",
];

/// Below the `app` table: whether every repeat of each level ended with
/// only 2xx answers and no client error, as seed 003 reports its rows
/// (the main table's medians would hide one bad repeat).
fn clean_runs(rows: &[Row]) -> String {
    let mut o = String::from(
        "Clean runs: the worst repeat of each level (a run is clean with no non-2xx answer and no client error).\n\n",
    );
    let _ = writeln!(o, "| {} |", CLEAN_RUN_COLUMNS.join(" | "));
    let _ = writeln!(o, "|{}", "---|".repeat(CLEAN_RUN_COLUMNS.len()));
    for r in rows.iter().filter(|r| r.status == "ok") {
        let clean = r.non_2xx_max == 0 && r.client_errors_max == 0;
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} |",
            r.case,
            r.server,
            r.non_2xx_max,
            r.client_errors_max,
            if clean { "yes" } else { "**no**" }
        );
    }
    o.push('\n');
    o
}

/// Columns of the caching scenarios' ratio table, in order (tests check them).
pub const CACHE_RATIO_COLUMNS: [&str; 9] = [
    "case",
    "weir ÷",
    "req/s ratio, per round (median)",
    "req/s ratio of medians",
    "weir p99 ms",
    "its p99 ms",
    "p99: weir ÷ it",
    "target (req/s ratio)",
    "met",
];

/// Below the table of a caching scenario or one with targets: how many
/// requests reached the backend (the misses, caches only), and weir's ratios to every other row, req/s and p99, with
/// the scenario's targets ([`Scenario::targets`]) judged by the per-round
/// median.
fn cache_notes(s: Scenario, rows: &[Row]) -> String {
    let mut o = String::new();
    let misses: Vec<String> = rows
        .iter()
        .filter(|r| r.status == "ok")
        .filter_map(|r| Some(format!("{} {}", r.server, r.backend_requests_max?)))
        .collect();
    if !misses.is_empty() {
        let _ = writeln!(
            o,
            "Requests that reached the backend during a repeat's load (warm-up and measured; each a miss, every \
             other response a hit), the most of any repeat: {}.\n",
            misses.join(", ")
        );
    }
    let _ = writeln!(
        o,
        "weir's ratios: req/s weir ÷ the row (above 1: weir serves more), p99 weir ÷ the row (below 1: weir's \
         tail is shorter).\n"
    );
    header(&mut o, &CACHE_RATIO_COLUMNS);
    for r in rows.iter().filter(|r| r.server != "weir") {
        let target = s
            .targets()
            .iter()
            .find(|(name, _)| *name == r.server)
            .map(|&(_, t)| t);
        let target_text = target.map_or("—".into(), |t| format!("≥ {t:.2}"));
        let Some(w) = weir_row(rows, r).filter(|_| r.status == "ok" && r.rps_median > 0.0) else {
            let _ = writeln!(
                o,
                "| {} | {} | n/a | n/a | n/a | n/a | n/a | {target_text} | n/a |",
                r.case, r.server
            );
            continue;
        };
        let per_round = round_ratios(rows, r).map(|(_, v)| super::median(v));
        let met = match (target, per_round) {
            (Some(t), Some(x)) if x >= t => "yes",
            (Some(_), Some(_)) => "no",
            (Some(_), None) => "n/a",
            (None, _) => "—",
        };
        let _ = writeln!(
            o,
            "| {} | {} | {} | {:.2} | {:.2} | {:.2} | {} | {target_text} | {met} |",
            r.case,
            r.server,
            per_round.map_or("n/a".into(), |x| format!("{x:.2}")),
            w.rps_median / r.rps_median,
            w.p99_ms,
            r.p99_ms,
            if r.p99_ms > 0.0 {
                format!("{:.2}", w.p99_ms / r.p99_ms)
            } else {
                "n/a".into()
            },
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

/// The run folder's README: machine, versions, command, what each server
/// got, links.
pub fn readme(s: &Summary, cfg: &CompareConfig) -> String {
    let mut o = format!(
        "# weir-bench compare run {}\n\nCommand: `{}`\n\n",
        s.run, s.command
    );
    let _ = writeln!(
        o,
        "Machine: {} CPUs; {}; generator {}; {} repeats of {:.1} s after {:.1} s warm-up \
         (the concurrency scenario: at least {:.0} s; the app scenario: at least {:.0} s after {:.0} s); \
         servers with {} workers/threads.\n",
        s.cpus,
        mode_line(cfg),
        if cfg.copy_bodies {
            "copying response bodies into its memory (`--copy-bodies`)"
        } else {
            "dropping HTTP/1.1 bodies of known length in the kernel over cleartext (MSG_TRUNC: counted, not copied)"
        },
        s.repeats,
        s.duration_s,
        s.warmup_s,
        s.concurrency_min_measure_s,
        super::scenarios::APP_MIN_MEASURE.as_secs_f64(),
        super::scenarios::APP_MIN_WARMUP.as_secs_f64(),
        s.workers
    );
    let _ = writeln!(
        o,
        "## What each server got\n\n\
         - Certificate: {cert}, self-signed, the same for every server.\n\
         - Memory: PSS (proportional set size, `/proc/PID/smaps_rollup`) summed over the server's process tree is \
         the headline figure, since summed RSS counts the pages a master shares with its workers once per process; \
         RSS is kept in its own columns.\n\
         - Client keep-alive: {ka} s idle timeout on every server (weir `server.timeouts.keepalive`, nginx \
         `keepalive_timeout`, HAProxy `timeout client` and `timeout http-keep-alive`, Caddy `timeouts idle`, \
         Apache `KeepAliveTimeout`, lighttpd `server.max-keep-alive-idle`, Varnish `timeout_idle`), no request cap.\n\
         - Upstream pool (proxy): up to {pool} idle connections to the backend on every proxy: weir `max_idle = {pool}` \
         (its default), nginx `keepalive {pool}` (per worker), HAProxy `http-reuse always` with `pool-max-conn {pool}`, \
         Caddy `keepalive_idle_conns_per_host {pool}`; Apache's mod_proxy_http keeps a pool per process of up to its \
         threads (`enablereuse`, its default); Varnish reuses backend connections without a cap. weir's and \
         nginx's pools are per worker, HAProxy's and Caddy's per process; with 100 clients none fills its pool.\n\
         - Apache: the event MPM, `StartServers` = `ServerLimit` = workers, `ThreadsPerChild` = the case's connections \
         ÷ workers plus a quarter (at least 25, at most {amax}, in front of the app at most {aamax} since each of those requests holds a thread while the app answers; `MaxRequestWorkers` = their product, none reaped; \
         with every thread busy, the event MPM would close idle keep-alive connections), `AsyncRequestWorkerFactor` \
         raised so each process holds its share of the case's connections, `KeepAlive On`, `MaxKeepAliveRequests 0`, \
         `EnableSendfile On`, mod_ssl with a shmcb session cache, no access log, mod_cache loaded in the cache \
         scenario only. As a proxy: mod_proxy_http (`ProxyPass`), which sends X-Forwarded-For and -Host itself \
         (and -Server), X-Forwarded-Proto set with mod_headers; in front of the app a `balancer://` of the two \
         processes (by requests).\n\
         - Caddy: its defaults (what its users run), a Caddyfile with `admin off` and `auto_https off` (the \
         harness gives it the run's certificate with `tls cert key`), `GOMAXPROCS` = workers, idle timeout as the \
         others, no access log (Caddy logs none unless asked); `file_server`, `reverse_proxy` (round-robin over the \
         app's two processes in `app`), `encode gzip zstd` in `compress`. It has no cache in Debian's build.\n\
         - nginx static: `open_file_cache max=10000 inactive=60s; open_file_cache_valid 60s; \
         open_file_cache_min_uses 1; open_file_cache_errors on;` (weir serves small files from memory).\n\
         - HAProxy: `maxconn {mc}` (above the largest case's connections) in `global` and `defaults`, with \
         `no strict-limits`, so a descriptor limit below 2 × maxconn is a warning, not a refusal to start.\n\
         - Features-on proxy row (`http + log`): an access log line per request to a file on every proxy: weir's JSON \
         log, nginx `access_log … combined buffer=64k flush=1s` (buffered as weir's is), HAProxy `option httplog` \
         to `log stdout` redirected to a file, Caddy `log {{ output file … format json }}`, Apache `CustomLog … combined` \
         with `BufferedLogs On`; Varnish (shared-memory \
         log, `varnishncsa` not run) is not in it. Each repeat checks that the log was written, then deletes it.\n\
         - Caches (`cache`, `chain`): 256 MiB of memory and 2 minutes for a response that gives no freshness on \
         every cache: weir `[cache] memory = \"256MiB\"` and `cache = {{ default_ttl = \"2m\", grace = \"10s\" }}`; Varnish `-s \
         malloc,256m` with only a backend in its VCL (its built-in VCL: `-b`), its working directory on a RAM-backed \
         file system (its manual's advice); nginx `proxy_cache_path … keys_zone=weir_bench:10m max_size=256m \
         use_temp_path=off` on the same RAM-backed folder, `proxy_cache_valid 200 2m`, `proxy_cache_lock on`, \
         `proxy_cache_use_stale updating`, `proxy_cache_background_update on`, its upstream pool as in `proxy` and \
         `open_file_cache` as for files (a hit opens its cache file through it); Apache mod_cache with its \
         shared-memory store (`CacheEnable socache /`, `CacheSocache shmcb:…(268435456)`, `CacheQuickHandler On`, \
         `CacheDefaultExpire 120`, `CacheIgnoreNoLastMod On`, `CacheLock On`). Each round starts with empty \
         caches. The chain (`haproxy-varnish`): HAProxy as in `proxy` with TLS, `server … send-proxy-v2` to a \
         Varnish listening with `-a …,PROXY`; the two processes' CPU and memory are added up.\n\
         - PHP (`php`): each server in front of its own php-fpm master (counted as part of it) with the same pool: \
         `pm = static`, `pm.max_children = {php}`, a Unix socket with `listen.backlog = 65535`, `clear_env = yes`, \
         php.ini (opcache on) as installed. A kept FastCGI connection holds a child, so at most {php} are kept, \
         by the servers that can make a request wait for one: weir `php = {{ to = \"unix:…\", max_conns = {php}, keep_conn = true }}`; \
         Apache's event MPM, `proxy_fcgi` with `SetHandler \"proxy:unix:…|fcgi://localhost\"` and `ProxySet \
         enablereuse=on max=…` (per process, {php} ÷ workers). nginx opens a connection per request (`upstream php \
         {{ server unix:…; }}`, no `fastcgi_keep_conn`: it cannot make a request wait, and its connections beyond \
         the kept ones would wait for a child until `fastcgi_read_timeout`), with Debian's `fastcgi.conf` parameters \
         and `try_files $fastcgi_script_name =404`.\n\
         - TLS passthrough (`tcp`): the client sends SNI and Host `tcp.test`; weir `passthrough = {{ to = … }}`, \
         HAProxy `mode tcp` with `tcp-request inspect-delay 5s`, `tcp-request content accept if {{ req_ssl_hello_type 1 }}` \
         and `use_backend … if {{ req.ssl_sni -i tcp.test }}`, client and server timeouts {ka} s. The backend is weir \
         serving the docroot over TLS (`configs/tcp/backend`); `backend-direct` is that config on the front's port.\n\
         - App (`app`): {apps} processes of `weir-bench backend` (one thread each) behind every server, counted in \
         its CPU and memory: weir runs them itself (`app = {{ run = \"… backend --listen 127.0.0.1:$PORT …\", \
         instances = {apps} }}`, its app proxy with weir's default settings); nginx, Apache, Caddy and HAProxy get the \
         same two, started before them on the two ports above theirs, as the servers of their `proxy` upstream and backend; \
         HAProxy (`maxconn {amc}` per server) and Caddy (`max_conns_per_host {amc}`) queue requests above {amc} connections \
         to each app process, which keeps them within this machine's descriptors at c10000.\n",
        cert = s.certificate,
        ka = s.keepalive_s,
        pool = s.upstream_idle_pool,
        mc = s.haproxy_maxconn,
        php = super::scenarios::PHP_CHILDREN,
        apps = super::scenarios::APP_INSTANCES,
        amax = super::servers::APACHE_MAX_THREADS,
        aamax = super::servers::APACHE_APP_MAX_THREADS,
        amc = super::servers::APP_SERVER_MAXCONN,
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

/// `report.html`: the run's README (machine, method, what each server
/// got), then each scenario's table with its chart inline, then a link to
/// every server's config. Built from the files the run wrote (`names`: the
/// scenarios', in order), so the page says exactly what they say.
pub fn html(out: &std::path::Path, run: &str, names: &[&str]) -> std::io::Result<String> {
    let mut body = String::new();
    let readme = std::fs::read_to_string(out.join("README.md"))?;
    // The README's list of links to each table and chart: the page has them inline.
    let readme: String = readme
        .lines()
        .filter(|l| !(l.starts_with("- [") && l.contains(".svg)")))
        .map(|l| format!("{l}\n"))
        .collect();
    markdown_html(&readme, &mut body);
    body.push_str("<nav><h2>Scenarios</h2><ul>");
    for n in names {
        let _ = write!(body, "<li><a href=\"#{n}\">{n}</a></li>");
    }
    body.push_str("</ul></nav>\n");
    for n in names {
        let _ = writeln!(body, "<section id=\"{n}\">");
        match std::fs::read_to_string(out.join(format!("{n}.md"))) {
            Ok(md) => markdown_html(&md, &mut body),
            Err(_) => {
                let _ = write!(
                    body,
                    "<h2>{n}</h2><p>No table: the scenario wrote none.</p>"
                );
            }
        }
        if let Ok(svg) = std::fs::read_to_string(out.join(format!("{n}.svg"))) {
            let _ = writeln!(body, "<figure>{svg}</figure>");
        }
        body.push_str("</section>\n");
    }
    let mut configs = Vec::new();
    list_files(&out.join("configs"), out, &mut configs);
    configs.sort();
    body.push_str("<section id=\"configs\"><h2>Configs</h2><ul>\n");
    for c in &configs {
        let c = esc(c);
        let _ = writeln!(body, "<li><a href=\"{c}\">{c}</a></li>");
    }
    body.push_str("</ul></section>\n");
    Ok(format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>weir-bench compare run {run}</title>\
         <style>body{{font-family:sans-serif;margin:2em;max-width:110em}}\
         table{{border-collapse:collapse;font-size:0.85em}}\
         th,td{{border:1px solid #ccc;padding:0.2em 0.5em;text-align:right}}\
         th:nth-child(-n+2),td:nth-child(-n+2){{text-align:left}}\
         figure{{margin:1em 0}}code{{background:#f4f4f4}}</style></head>\n<body>\n{body}</body></html>\n",
        run = esc(run)
    ))
}

/// Markdown (with tables) as HTML, by pulldown-cmark.
fn markdown_html(md: &str, out: &mut String) {
    let parser = pulldown_cmark::Parser::new_ext(md, pulldown_cmark::Options::ENABLE_TABLES);
    pulldown_cmark::html::push_html(out, parser);
}

/// Every file under `dir`, as a path relative to `base` with `/`.
fn list_files(dir: &std::path::Path, base: &std::path::Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            list_files(&p, base, out);
        } else if let Ok(rel) = p.strip_prefix(base) {
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
}

/// The CPU mode of a run, in words.
fn mode_line(cfg: &CompareConfig) -> String {
    match &cfg.pin {
        Some(p) => format!(
            "mode: pinned (each server, all its processes and threads, on CPU {}; the generator and the backend on \
             CPU {}; one worker per server CPU; ratios are work per request per core)",
            super::limits::cpu_list(&p.server),
            super::limits::cpu_list(&p.generator)
        ),
        None => "mode: shared (server, generator and backend share every CPU; a server that uses fewer cores \
                 leaves more to the generator)"
            .into(),
    }
}

/// Columns of the `startup` table, in order (tests check them).
pub const STARTUP_COLUMNS: [&str; 7] = [
    "case",
    "server",
    "first 200 ms (median)",
    "min–max ms",
    "repeats",
    "probes (median)",
    "this ÷ weir",
];

/// Columns of the `idle` table, in order (tests check them).
pub const IDLE_COLUMNS: [&str; 14] = [
    "case",
    "server",
    "connections",
    "established",
    "served",
    "held",
    "errors",
    "idle PSS MiB",
    "held PSS MiB",
    "KiB per connection (median, PSS)",
    "min–max KiB",
    "idle RSS MiB",
    "held RSS MiB",
    "KiB per connection (median, RSS)",
];

fn header(o: &mut String, cols: &[&str]) {
    let _ = writeln!(o, "| {} |", cols.join(" | "));
    let _ = writeln!(o, "|{}", "---|".repeat(cols.len()));
}

fn status_line(o: &mut String, case: &str, server: &str, status: &str, cols: usize) {
    let _ = writeln!(
        o,
        "| {case} | {server} | {} |{}",
        status.replace('|', "/"),
        " |".repeat(cols - 3)
    );
}

/// The Markdown table of the `startup` scenario.
pub fn startup_markdown(rows: &[StartupRow], cfg: &CompareConfig) -> String {
    let s = Scenario::Startup;
    let mut o = format!("## Scenario `{}`\n\n{}\n\n", s.name(), s.describe());
    let _ = writeln!(
        o,
        "Median of {} starts; spread is min–max. \"probes\" counts the connect/GET attempts before the first good answer.\n",
        cfg.repeats
    );
    header(&mut o, &STARTUP_COLUMNS);
    let weir = rows
        .iter()
        .find(|r| r.server == "weir" && r.status == "ok" && r.median_ms > 0.0);
    for r in rows {
        if r.status != "ok" {
            status_line(&mut o, &r.case, &r.server, &r.status, STARTUP_COLUMNS.len());
            continue;
        }
        let ratio = weir.map_or("n/a".into(), |w| {
            format!("{:.2}", r.median_ms / w.median_ms)
        });
        let _ = writeln!(
            o,
            "| {} | {} | {:.1} | {:.1}–{:.1} | {} | {} | {} |",
            r.case, r.server, r.median_ms, r.min_ms, r.max_ms, r.repeats, r.probes, ratio
        );
    }
    o.push('\n');
    o
}

/// The Markdown table of the `idle` scenario.
pub fn idle_markdown(rows: &[IdleRow], cfg: &CompareConfig) -> String {
    let s = Scenario::Idle;
    let mut o = format!("## Scenario `{}`\n\n{}\n\n", s.name(), s.describe());
    let _ = writeln!(
        o,
        "Median of {} repeats, each on a freshly started server; spread is min–max. \
         KiB per connection = (held PSS − idle PSS) / connections still open at the sample, PSS summed over the \
         server's processes (shared pages counted once); the RSS columns, for comparison, count them per process. \
         established/served/held are the worst repeat's, errors the worst repeat's failed connections.\n",
        cfg.repeats
    );
    header(&mut o, &IDLE_COLUMNS);
    for r in rows {
        if r.status != "ok" {
            status_line(&mut o, &r.case, &r.server, &r.status, IDLE_COLUMNS.len());
            continue;
        }
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1}–{:.1} | {:.1} | {:.1} | {:.1} |",
            r.case,
            r.server,
            r.connections,
            r.established,
            r.served,
            r.held,
            r.errors,
            r.pss_idle_mib,
            r.pss_held_mib,
            r.kib_per_conn,
            r.kib_min,
            r.kib_max,
            r.rss_idle_mib,
            r.rss_held_mib,
            r.kib_per_conn_rss
        );
    }
    o.push('\n');
    o
}

/// One bar of a single-panel chart: label, median, min, max, is weir.
struct Bar {
    label: String,
    median: f64,
    min: f64,
    max: f64,
    weir: bool,
}

/// A single-panel horizontal bar chart with min–max whiskers.
fn bar_svg(title: &str, axis: &str, bars: &[Bar]) -> String {
    let bar_h = 16.0;
    let label_w = 230.0;
    let panel_w = 480.0;
    let top = 50.0;
    let height = top + (bars.len().max(1) as f64) * (bar_h + 4.0) + 40.0;
    let width = label_w + panel_w + 80.0;
    let max = bars
        .iter()
        .map(|b| b.max.max(b.median))
        .fold(0.001, f64::max);
    let mut o = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"10\" y=\"20\" font-size=\"15\" font-weight=\"bold\">{} (median; whiskers = min–max)</text>\n\
         <text x=\"{label_w}\" y=\"42\" font-weight=\"bold\">{}</text>\n",
        esc(title),
        esc(axis)
    );
    let scale = (panel_w - 70.0) / max;
    for (i, b) in bars.iter().enumerate() {
        let y = top + i as f64 * (bar_h + 4.0);
        let color = if b.weir { "#d9480f" } else { "#1c7ed6" };
        let (w, lo, hi) = (b.median * scale, b.min * scale, b.max * scale);
        let _ = writeln!(
            o,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n\
             <rect x=\"{label_w}\" y=\"{y}\" width=\"{w:.1}\" height=\"{bar_h}\" fill=\"{color}\"/>\n\
             <line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"black\"/>\n\
             <text x=\"{:.1}\" y=\"{}\">{:.1}</text>",
            label_w - 6.0,
            y + 12.0,
            esc(&b.label),
            label_w + lo,
            label_w + hi,
            y + bar_h / 2.0,
            y + bar_h / 2.0,
            label_w + w.max(hi) + 4.0,
            y + 12.0,
            b.median
        );
    }
    if bars.is_empty() {
        let _ = writeln!(
            o,
            "<text x=\"10\" y=\"{}\">no server was measured in this scenario</text>",
            top + 12.0
        );
    }
    o.push_str("</svg>\n");
    o
}

/// The `startup` chart: ms to the first 200 per server.
pub fn startup_svg(rows: &[StartupRow]) -> String {
    let bars: Vec<Bar> = rows
        .iter()
        .filter(|r| r.status == "ok")
        .map(|r| Bar {
            label: format!("{} · {}", r.case, r.server),
            median: r.median_ms,
            min: r.min_ms,
            max: r.max_ms,
            weir: r.server == "weir",
        })
        .collect();
    bar_svg(
        "weir-bench compare: startup",
        "ms from spawn to first 200 (lower is better)",
        &bars,
    )
}

/// The `idle` chart: KiB per held connection per server.
pub fn idle_svg(rows: &[IdleRow]) -> String {
    let bars: Vec<Bar> = rows
        .iter()
        .filter(|r| r.status == "ok")
        .map(|r| Bar {
            label: format!("{} · {}", r.case, r.server),
            median: r.kib_per_conn,
            min: r.kib_min,
            max: r.kib_max,
            weir: r.server == "weir",
        })
        .collect();
    bar_svg(
        "weir-bench compare: idle",
        "server KiB (PSS) per idle HTTPS connection (lower is better)",
        &bars,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(server: &str, by_round: &[f64]) -> Row {
        Row {
            case: "http".into(),
            server: server.into(),
            status: "ok".into(),
            repeats: by_round.len(),
            rps_by_round: by_round.to_vec(),
            rps_median: super::super::median(by_round.to_vec()),
            ..Row::default()
        }
    }

    #[test]
    fn per_round_ratio_pairs_the_repeats_of_each_round() {
        // The machine's speed changes from round to round and both servers'
        // repeats move together: weir is 1.2 x nginx in every round.
        let rows = vec![
            row("weir", &[120.0, 60.0, 90.0]),
            row("nginx", &[100.0, 50.0, 75.0]),
            row("haproxy", &[40.0, 90.0, 60.0]),
        ];
        assert_eq!(weir_round_ratio(&rows, &rows[1]), "1.20");
        assert_eq!(weir_ratio(&rows, &rows[1]), "1.20");
        assert_eq!(weir_round_ratio(&rows, &rows[0]), "1.00");
        // 3.00, 0.67, 1.50: the median is 1.50.
        assert_eq!(weir_round_ratio(&rows, &rows[2]), "1.50");

        let drift = vec![
            row("weir", &[130.0, 110.0, 60.0]),
            row("nginx", &[120.0, 100.0, 50.0]),
        ];
        // Medians 110 / 100 = 1.10; per round 1.08, 1.10, 1.20.
        assert_eq!(weir_ratio(&drift, &drift[1]), "1.10");
        assert_eq!(weir_round_ratio(&drift, &drift[1]), "1.10");
        let skew = vec![
            row("weir", &[100.0, 100.0, 60.0]),
            row("nginx", &[70.0, 95.0, 50.0]),
        ];
        // Medians 100 / 70 = 1.43; per round 1.43, 1.05, 1.20: median 1.20.
        assert_eq!(weir_ratio(&skew, &skew[1]), "1.43");
        assert_eq!(weir_round_ratio(&skew, &skew[1]), "1.20");
    }

    #[test]
    fn the_median_interval_is_two_order_statistics_with_their_exact_confidence() {
        // n = 5: only the smallest and largest, 1 - 2/32 = 93.75 %.
        let (lo, hi, c) = median_interval(vec![5.0, 1.0, 4.0, 2.0, 3.0], 0.90).unwrap();
        assert_eq!((lo, hi), (1.0, 5.0));
        assert!((c - 0.9375).abs() < 1e-12, "{c}");
        // n = 4: 1 - 2/16 = 87.5 % < 90 %: no interval; at 80 % there is.
        assert_eq!(median_interval(vec![1.0, 2.0, 3.0, 4.0], 0.90), None);
        assert_eq!(
            median_interval(vec![1.0, 2.0, 3.0, 4.0], 0.80),
            Some((1.0, 4.0, 0.875))
        );
        assert_eq!(median_interval(vec![], 0.90), None);
        // n = 15: P(B <= 3) = 576/32768, so the 4th and 12th values, 96.5 %;
        // the 5th and 11th would give only 88.2 %.
        let v: Vec<f64> = (1..=15).rev().map(f64::from).collect();
        let (lo, hi, c) = median_interval(v, 0.90).unwrap();
        assert_eq!((lo, hi), (4.0, 12.0));
        assert!((c - (1.0 - 2.0 * 576.0 / 32768.0)).abs() < 1e-12, "{c}");
        // n = 30: P(B <= 10) = 0.0494 (90.1 %), P(B <= 11) = 0.1002: the
        // 11th and 20th values.
        let v: Vec<f64> = (1..=30).map(f64::from).collect();
        let (lo, hi, c) = median_interval(v, 0.90).unwrap();
        assert_eq!((lo, hi), (11.0, 20.0));
        assert!(c > 0.900 && c < 0.902, "{c}");
        // n = 2,001: about 1.645 standard deviations (sqrt(n) / 2 = 22.4)
        // either side of the middle, the 964th and 1,038th values.
        let v: Vec<f64> = (1..=2001).map(f64::from).collect();
        let (lo, hi, c) = median_interval(v, 0.90).unwrap();
        assert_eq!((lo, hi), (964.0, 1038.0));
        assert!(c > 0.900 && c < 0.91, "{c}");
    }

    #[test]
    fn the_median_interval_covers_the_true_median_as_often_as_it_says() {
        // Samples from a skewed distribution whose median is known: 1 + e^x
        // for x uniform on [-1, 2) has median 1 + e^0.5. Over many runs of 15
        // rounds, the interval must hold it at least 90 % of the time.
        let truth = 1.0 + 0.5f64.exp();
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut uniform = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let runs = 4000;
        let mut held = 0;
        for _ in 0..runs {
            let v: Vec<f64> = (0..15)
                .map(|_| 1.0 + (uniform() * 3.0 - 1.0).exp())
                .collect();
            let (lo, hi, _) = median_interval(v, 0.90).unwrap();
            held += usize::from(lo <= truth && truth <= hi);
        }
        let share = held as f64 / runs as f64;
        assert!((0.95..=0.98).contains(&share), "held {share}");
    }

    #[test]
    fn the_interval_column_reads_the_per_round_ratios() {
        let rows = vec![
            row("weir", &[110.0, 120.0, 100.0, 130.0, 90.0]),
            row("haproxy", &[100.0, 100.0, 100.0, 100.0, 100.0]),
            row("nginx", &[100.0, 100.0, 100.0]),
        ];
        assert_eq!(weir_round_ratio(&rows, &rows[1]), "1.10");
        assert_eq!(weir_round_interval(&rows, &rows[1]), "0.90–1.30 (94 %)");
        assert_eq!(weir_round_interval(&rows, &rows[0]), "n/a");
        assert_eq!(weir_round_interval(&rows, &rows[2]), "n/a");
        let cfg = CompareConfig::for_tests(Scenario::Proxy);
        let md = markdown(Scenario::Proxy, &rows, &cfg);
        assert!(md.contains("| 1.10 | 1.10 | 0.90–1.30 (94 %) |"), "{md}");
        // summary.json's record of the same: haproxy's, not nginx's (a
        // round missing) nor weir's own.
        let r = ratios(&rows);
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!((r[0].server.as_str(), r[0].per_round), ("haproxy", 1.1));
        assert!((r[0].of_medians - 1.1).abs() < 1e-12);
        assert_eq!(r[0].interval, Some([0.9, 1.3, 0.9375]));
        // Another scenario's weir row with the same case is not paired.
        let mut other = rows.clone();
        other[0].scenario = "static".into();
        assert!(ratios(&other).is_empty());
    }

    #[test]
    fn per_round_ratio_needs_every_round_of_both() {
        let rows = vec![row("weir", &[100.0, 90.0]), row("nginx", &[80.0])];
        assert_eq!(weir_round_ratio(&rows, &rows[1]), "n/a");
        let mut failed = row("nginx", &[80.0, 70.0]);
        failed.status = "failed: port in use".into();
        let rows = vec![row("weir", &[100.0, 90.0]), failed];
        assert_eq!(weir_round_ratio(&rows, &rows[1]), "n/a");
        let rows = vec![row("nginx", &[80.0, 70.0])];
        assert_eq!(weir_round_ratio(&rows, &rows[0]), "n/a");
    }

    #[test]
    fn the_app_table_says_whether_every_repeat_of_each_level_was_clean() {
        let mut dirty = row("haproxy", &[50.0]);
        (dirty.non_2xx_max, dirty.client_errors_max) = (0, 3);
        let mut failed = row("nginx", &[]);
        failed.status = "failed: port in use".into();
        let rows = vec![row("weir", &[60.0]), dirty, failed];
        let md = clean_runs(&rows);
        assert!(
            md.contains(&format!("| {} |", CLEAN_RUN_COLUMNS.join(" | "))),
            "{md}"
        );
        assert!(md.contains("| http | weir | 0 | 0 | yes |"), "{md}");
        assert!(md.contains("| http | haproxy | 0 | 3 | **no** |"), "{md}");
        // A row that was not measured has no clean run to report.
        assert!(!md.contains("| nginx |"), "{md}");
    }

    /// The seed scenarios add the seed's own columns under the table:
    /// mean and longest latency and failed requests, as ab prints them.
    #[test]
    fn a_seed_scenario_has_its_seeds_columns_under_the_table() {
        let mut apache = row("apache", &[400.0, 450.0, 500.0]);
        apache.case = "ab n1000 c50".into();
        apache.mean_ms = 110.0;
        apache.max_ms = 2197.0;
        apache.non_2xx_max = 2;
        apache.client_errors_max = 1;
        let table = seed_table(&[apache.clone()]);
        assert!(
            table.contains("| case | server | requests/s | mean ms | longest ms | failed |"),
            "{table}"
        );
        assert!(
            table.contains("| ab n1000 c50 | apache | 450 | 110.00 | 2197.0 | 3 |"),
            "{table}"
        );
        let cfg = CompareConfig::for_tests(Scenario::Seed004);
        assert!(markdown(Scenario::Seed004, &[apache.clone()], &cfg).contains(&table));
        assert!(!markdown(Scenario::Static, &[apache], &cfg).contains("longest ms"));
    }

    #[test]
    fn the_compress_table_is_followed_by_each_servers_bytes_per_response() {
        let mut rows = vec![
            row("weir", &[14.0, 15.0, 14.5]),
            row("nginx", &[16.0, 16.5, 15.5]),
            Row {
                status: "not installed".into(),
                ..row("caddy", &[])
            },
        ];
        rows[0].bytes_per_response = 4_301.6;
        rows[1].bytes_per_response = 4_480.2;
        let cfg = CompareConfig::for_tests(Scenario::Compress);
        let md = markdown(Scenario::Compress, &rows, &cfg);
        assert!(
            md.contains("as the generator received them): weir 4302, nginx 4480.\n"),
            "{md}"
        );
        assert!(!markdown(Scenario::Proxy, &rows, &cfg).contains("Bytes per response"));
    }
}
