//! `weir-bench pool`: weir's per-round ratio to each competitor over the
//! rounds of several compare runs at once, with the interval of its median.
//!
//! Why: on a two-core machine shared with the generator and the backend, one
//! run's rounds swing by 10–30 %, so a target near weir's true ratio sits
//! inside a single run's interval. More rounds narrow it, and rounds of
//! runs made on the same build are as good as rounds of one long run. Each
//! run's rounds stay paired within that run (weir and the competitor
//! measured in the same round); only the ratios are pooled.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::Row;
use super::report::{median_interval, round_ratios};

/// Why a run folder could not be pooled.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    // The cause is in the message, not also a `source`: anyhow would
    // print it twice.
    #[error("cannot read {}: {cause}", path.display())]
    Read {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("{} is not a compare run's summary: {cause}", path.display())]
    Parse {
        path: PathBuf,
        cause: serde_json::Error,
    },
}

/// What pooling reads of a summary.json.
#[derive(serde::Deserialize)]
struct RunRows {
    #[serde(default)]
    rows: Vec<Row>,
    /// Runs made before `--copy-bodies` existed copied the bodies.
    #[serde(default = "copied")]
    generator_copies_bodies: bool,
}

fn copied() -> bool {
    true
}

/// The case label a copying generator's rounds pool under when the runs
/// mix both generators: a generator that copies large bodies is the limit
/// at their size, so its rounds are not pooled with the others'.
const COPIED: &str = " (bodies copied)";

/// weir against one competitor in one case, over every pooled run.
#[derive(Debug, Clone, PartialEq)]
pub struct Pooled {
    pub scenario: String,
    pub case: String,
    /// The competitor.
    pub server: String,
    /// Each run that measured the pair: its folder's name, its rounds and
    /// their median ratio.
    pub runs: Vec<(String, usize, f64)>,
    /// Every round's ratio, run after run.
    pub ratios: Vec<f64>,
}

impl Pooled {
    pub fn median(&self) -> f64 {
        super::median(self.ratios.clone())
    }

    /// `(low, high, confidence)` of the median at 90 % or more.
    pub fn interval(&self) -> Option<(f64, f64, f64)> {
        median_interval(self.ratios.clone(), 0.90)
    }
}

/// Reads each folder's summary.json and pools its rounds by scenario, case
/// and competitor, in that order.
pub fn pool(dirs: &[PathBuf]) -> Result<Vec<Pooled>, PoolError> {
    let mut out: BTreeMap<(String, String, String), Pooled> = BTreeMap::new();
    let runs = dirs
        .iter()
        .map(|d| read(d))
        .collect::<Result<Vec<_>, _>>()?;
    let mixed = runs
        .iter()
        .any(|r| r.generator_copies_bodies != runs[0].generator_copies_bodies);
    for (dir, run_rows) in dirs.iter().zip(runs) {
        let rows = run_rows.rows;
        let suffix = if mixed && run_rows.generator_copies_bodies {
            COPIED
        } else {
            ""
        };
        let run = dir.file_name().map_or_else(
            || dir.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        for r in &rows {
            let Some((_, v)) = round_ratios(&rows, r) else {
                continue;
            };
            let case = format!("{}{suffix}", r.case);
            let key = (r.scenario.clone(), case.clone(), r.server.clone());
            let p = out.entry(key).or_insert_with(|| Pooled {
                scenario: r.scenario.clone(),
                case,
                server: r.server.clone(),
                runs: Vec::new(),
                ratios: Vec::new(),
            });
            p.runs
                .push((run.clone(), v.len(), super::median(v.clone())));
            p.ratios.extend(v);
        }
    }
    Ok(out.into_values().collect())
}

fn read(dir: &Path) -> Result<RunRows, PoolError> {
    let path = dir.join("summary.json");
    let text = std::fs::read_to_string(&path).map_err(|cause| PoolError::Read {
        path: path.clone(),
        cause,
    })?;
    serde_json::from_str(&text).map_err(|cause| PoolError::Parse { path, cause })
}

/// The pooled ratios as a Markdown table.
pub fn markdown(pooled: &[Pooled]) -> String {
    let mut o = String::from(
        "| scenario | case | weir ÷ | runs | rounds | per-round median | interval (confidence) | each run's per-round median |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for p in pooled {
        let interval = match p.interval() {
            Some((lo, hi, c)) => format!("{lo:.2}–{hi:.2} ({:.0} %)", c * 100.0),
            None => "n/a".into(),
        };
        let each: Vec<String> = p
            .runs
            .iter()
            .map(|(run, n, m)| format!("{run}: {m:.2} ({n})"))
            .collect();
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {:.2} | {} | {} |",
            p.scenario,
            p.case,
            p.server,
            p.runs.len(),
            p.ratios.len(),
            p.median(),
            interval,
            each.join(", ")
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(server: &str, case: &str, rounds: &[f64]) -> serde_json::Value {
        serde_json::json!({
            "scenario": "proxy",
            "case": case,
            "server": server,
            "status": "ok",
            "repeats": rounds.len(),
            "rps_by_round": rounds,
            "rps_median": super::super::median(rounds.to_vec()),
        })
    }

    fn run(dir: &Path, name: &str, rows: Vec<serde_json::Value>) -> PathBuf {
        let d = dir.join(name);
        std::fs::create_dir_all(&d).unwrap();
        // Older runs lack fields; pooling reads only the rows it needs.
        let summary = serde_json::json!({ "run": name, "rows": rows });
        std::fs::write(d.join("summary.json"), summary.to_string()).unwrap();
        d
    }

    #[test]
    fn pools_each_runs_paired_rounds() {
        let t = tempfile::tempdir().unwrap();
        let a = run(
            t.path(),
            "a",
            vec![
                row("weir", "http", &[110.0, 120.0, 130.0]),
                row("haproxy", "http", &[100.0, 100.0, 100.0]),
                // A case weir did not measure pools nothing.
                row("haproxy", "https", &[50.0, 50.0, 50.0]),
            ],
        );
        let b = run(
            t.path(),
            "b",
            vec![
                row("weir", "http", &[90.0, 99.0]),
                row("haproxy", "http", &[100.0, 90.0]),
                // Rounds that do not pair (one missing) are left out.
                row("nginx", "http", &[80.0]),
            ],
        );
        let p = pool(&[a, b]).unwrap();
        assert_eq!(p.len(), 1, "{p:?}");
        let p = &p[0];
        assert_eq!((p.case.as_str(), p.server.as_str()), ("http", "haproxy"));
        let round2 = |v: &[f64]| {
            v.iter()
                .map(|x| (x * 100.0).round() / 100.0)
                .collect::<Vec<_>>()
        };
        assert_eq!(round2(&p.ratios), [1.1, 1.2, 1.3, 0.9, 1.1]);
        assert_eq!(p.runs.len(), 2);
        assert_eq!((p.runs[0].0.as_str(), p.runs[0].1), ("a", 3));
        assert!((p.runs[0].2 - 1.2).abs() < 1e-9);
        assert!((p.runs[1].2 - 1.0).abs() < 1e-9);
        assert!((p.median() - 1.1).abs() < 1e-9);
        // Five rounds: the interval is their minimum and maximum (93.8 %).
        let (lo, hi, c) = p.interval().unwrap();
        assert!(
            (lo - 0.9).abs() < 1e-9 && (hi - 1.3).abs() < 1e-9,
            "{lo} {hi}"
        );
        assert!((c - 0.9375).abs() < 1e-9);
        let md = markdown(std::slice::from_ref(p));
        assert!(
            md.contains("| proxy | http | haproxy | 2 | 5 | 1.10 | 0.90–1.30 (94 %) | a: 1.20 (3), b: 1.00 (2) |"),
            "{md}"
        );
    }

    #[test]
    fn rounds_of_a_copying_generator_pool_apart_from_the_others() {
        let t = tempfile::tempdir().unwrap();
        let rows = || {
            vec![
                row("weir", "http", &[110.0, 120.0, 130.0]),
                row("nginx", "http", &[100.0, 100.0, 100.0]),
            ]
        };
        // An older run (no field: it copied) and a newer one that copied.
        let old = run(t.path(), "old", rows());
        let copied = t.path().join("copied");
        std::fs::create_dir_all(&copied).unwrap();
        let summary = serde_json::json!({ "rows": rows(), "generator_copies_bodies": true });
        std::fs::write(copied.join("summary.json"), summary.to_string()).unwrap();
        let p = pool(&[old.clone(), copied]).unwrap();
        assert_eq!(p.len(), 1, "one generator: one pool, as before: {p:?}");
        assert_eq!((p[0].case.as_str(), p[0].ratios.len()), ("http", 6));
        let dropped = t.path().join("dropped");
        std::fs::create_dir_all(&dropped).unwrap();
        let summary = serde_json::json!({ "rows": rows(), "generator_copies_bodies": false });
        std::fs::write(dropped.join("summary.json"), summary.to_string()).unwrap();
        let p = pool(&[old, dropped]).unwrap();
        let cases: Vec<(&str, usize)> = p
            .iter()
            .map(|p| (p.case.as_str(), p.ratios.len()))
            .collect();
        assert_eq!(cases, [("http", 3), ("http (bodies copied)", 3)]);
    }

    #[test]
    fn a_folder_without_a_summary_is_named() {
        let t = tempfile::tempdir().unwrap();
        let err = pool(&[t.path().join("nowhere")]).unwrap_err();
        assert!(err.to_string().contains("nowhere/summary.json"), "{err}");
        std::fs::write(t.path().join("summary.json"), "not json").unwrap();
        let err = pool(&[t.path().to_path_buf()]).unwrap_err();
        assert!(
            err.to_string().contains("is not a compare run's summary"),
            "{err}"
        );
    }
}
