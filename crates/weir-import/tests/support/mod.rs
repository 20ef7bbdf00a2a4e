//! What every corpus test of weir-import shares: the corpus's paths, the
//! import with its options, the check of the output with weir's own config
//! loader, and the report's outcome of one directive.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use weir_config::error::{CertCheck, CertProblem};
use weir_import::{Imported, Kind, Options, Outcome};

/// Certificates named by the corpus do not exist here; their paths are carried as they are.
struct AnyCert;

impl CertCheck for AnyCert {
    fn check(&self, _: &Path, _: &Path) -> Result<(), CertProblem> {
        Ok(())
    }
}

pub fn corpus(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus").join(p)
}

/// Imports `corpus/p` as `kind`, reading absolute paths under `corpus/sysroot`.
pub fn import_with(kind: Kind, p: &str, sysroot: Option<&str>, htaccess: bool) -> Imported {
    let opts = Options {
        sysroot: sysroot.map(corpus),
        htaccess,
        ..Options::default()
    };
    weir_import::import(kind, &corpus(p), &opts).unwrap_or_else(|e| panic!("{p}: {e}"))
}

/// Validates the output with weir's loader; the directories and error
/// pages it names are made under a temporary directory first.
pub fn validate(out: &Imported) -> weir_config::Config {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().display().to_string();
    let mut text = out.toml.clone();
    let mut paths = Vec::new();
    for line in out.toml.lines() {
        if !["root = ", "errors = ", "access_log = "]
            .iter()
            .any(|k| line.starts_with(k))
        {
            continue;
        }
        for (i, _) in line.match_indices("\"/") {
            let rest = &line[i + 1..];
            let end = rest.find('"').unwrap();
            paths.push(rest[..end].to_string());
        }
    }
    paths.sort();
    paths.dedup();
    for p in paths.iter().rev() {
        if p.starts_with("/run/") || p.starts_with("/var/run/") || p.starts_with("/etc/ssl") {
            continue;
        }
        let local = format!("{base}{p}");
        if p.ends_with(".html") || p.ends_with(".php") || p.ends_with(".log") {
            std::fs::create_dir_all(Path::new(&local).parent().unwrap()).unwrap();
            std::fs::write(&local, "x").unwrap();
        } else {
            std::fs::create_dir_all(&local).unwrap();
        }
        text = text.replace(&format!("\"{p}\""), &format!("\"{local}\""));
    }
    weir_config::load_str_with("weir.toml", &text, tmp.path(), &AnyCert)
        .unwrap_or_else(|e| panic!("weir.toml does not validate:\n{e}\n\n{}", out.toml))
}

pub fn outcome<'a>(out: &'a Imported, directive: &str) -> &'a Outcome {
    &out.report
        .find(directive)
        .unwrap_or_else(|| panic!("no `{directive}` in the report:\n{}", out.report))
        .outcome
}
