//! Config errors as a user reads them: `file:line:col: message`, every one of
//! them, not just the first.

use std::fmt;
use std::ops::Range;

/// One problem in a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub file: String,
    pub line: usize,
    pub col: usize,
    pub message: String,
    /// About this machine's files (a root, a certificate, an error page
    /// that is not there), not about the config's text.
    pub machine: bool,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.file, self.line, self.col, self.message
        )
    }
}

/// Every problem found in a config; never empty.
#[derive(Debug, Clone, thiserror::Error)]
pub struct ConfigErrors(pub Vec<Diagnostic>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

/// Collects diagnostics against one source text, turning byte spans into
/// 1-based line and column numbers.
pub struct Collector<'a> {
    file: &'a str,
    src: &'a str,
    pub errors: Vec<Diagnostic>,
    /// How a site's certificate and key files are checked.
    pub certs: &'a dyn CertCheck,
}

/// Checks the certificate and key files a site names. The config crate
/// reads no certificate itself: the binary passes the TLS crate's check
/// (`weir_tls::CertFiles`), which parses both and matches them.
pub trait CertCheck {
    fn check(&self, cert: &std::path::Path, key: &std::path::Path) -> Result<(), CertProblem>;
}

/// What is wrong with a certificate pair, as a message naming the file.
#[derive(Debug, Clone)]
pub enum CertProblem {
    Cert(String),
    Key(String),
}

/// The check for tools that validate without TLS: both files can be read.
pub struct FilesReadable;

impl CertCheck for FilesReadable {
    fn check(&self, cert: &std::path::Path, key: &std::path::Path) -> Result<(), CertProblem> {
        let readable = |p: &std::path::Path| std::fs::File::open(p).map(drop);
        readable(cert)
            .map_err(|e| CertProblem::Cert(format!("certificate file {}: {e}", cert.display())))?;
        readable(key).map_err(|e| CertProblem::Key(format!("key file {}: {e}", key.display())))
    }
}

impl<'a> Collector<'a> {
    pub fn new(file: &'a str, src: &'a str, certs: &'a dyn CertCheck) -> Self {
        Collector {
            file,
            src,
            errors: Vec::new(),
            certs,
        }
    }

    pub fn at(&mut self, span: Range<usize>, message: impl Into<String>) {
        self.push(span, message.into(), false);
    }

    /// A problem with a file the config names (missing, unreadable, not a
    /// directory), which another machine may not have.
    pub fn at_file(&mut self, span: Range<usize>, message: impl Into<String>) {
        self.push(span, message.into(), true);
    }

    fn push(&mut self, span: Range<usize>, message: String, machine: bool) {
        let (line, col) = line_col(self.src, span.start);
        self.errors.push(Diagnostic {
            file: self.file.to_string(),
            line,
            col,
            message,
            machine,
        });
    }

    pub fn into_result<T>(mut self, ok: T) -> Result<T, ConfigErrors> {
        if self.errors.is_empty() {
            Ok(ok)
        } else {
            self.errors.sort_by_key(|d| (d.line, d.col));
            self.errors.dedup();
            Err(ConfigErrors(self.errors))
        }
    }
}

pub fn line_col(src: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(src.len());
    let before = &src[..offset];
    let line = before.matches('\n').count() + 1;
    let col = before
        .rfind('\n')
        .map(|nl| before[nl + 1..].chars().count())
        .unwrap_or_else(|| before.chars().count())
        + 1;
    (line, col)
}

/// The known key closest to a misspelt one, if it is close enough to be a
/// likely typo.
pub fn suggest<'k>(unknown: &str, known: &[&'k str]) -> Option<&'k str> {
    known
        .iter()
        .map(|k| (strsim::damerau_levenshtein(unknown, k), *k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 3))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_and_column_are_one_based() {
        let src = "a = 1\nbb = 2\n";
        assert_eq!(line_col(src, 0), (1, 1));
        assert_eq!(line_col(src, 6), (2, 1));
        assert_eq!(line_col(src, 9), (2, 4));
    }

    #[test]
    fn suggests_close_keys_only() {
        let known = ["root", "listen", "tls", "browse"];
        assert_eq!(suggest("roott", &known), Some("root"));
        assert_eq!(suggest("lisen", &known), Some("listen"));
        assert_eq!(suggest("completely_else", &known), None);
    }
}
