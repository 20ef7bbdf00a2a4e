//! The one error of an import: the input could not be read or parsed,
//! named `file:line:col` as `weir validate` names a config's.

use std::fmt;

/// Where in which input file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The file as the report shows it (relative to the main file's directory when under it).
    pub file: String,
    pub line: usize,
    pub col: usize,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.col)
    }
}

/// The input could not be read or parsed; exit 1.
#[derive(Debug, thiserror::Error)]
#[error("{at}: {message}")]
pub struct Error {
    pub at: Origin,
    pub message: String,
}

impl Error {
    pub fn new(at: Origin, message: impl Into<String>) -> Error {
        Error {
            at,
            message: message.into(),
        }
    }
}
