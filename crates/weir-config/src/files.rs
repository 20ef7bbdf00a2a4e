//! What a static site is configured with: root, index files, listing,
//! precompressed sidecars, compression and the file cache. Plain data with
//! its defaults; serving it is `weir_static`'s job.

use std::path::PathBuf;

/// Content codings weir knows, for precompressed sidecars and on-the-fly
/// compression (defined beside their negotiation and encoders).
pub use weir_http::encoding::Encoding;

/// On-the-fly compression settings.
#[derive(Debug, Clone, PartialEq)]
pub struct CompressOptions {
    pub enabled: bool,
    /// Files smaller than this are sent as they are.
    pub min_size: u64,
    /// Codings offered, in order of preference.
    pub encodings: Vec<Encoding>,
    /// MIME types (exact, or `text/*` prefix) worth compressing.
    pub types: Vec<String>,
}

impl Default for CompressOptions {
    /// Enabled, 1 KiB minimum, br > zstd > gzip, the usual textual types.
    fn default() -> Self {
        CompressOptions {
            enabled: true,
            min_size: 1024,
            encodings: vec![Encoding::Br, Encoding::Zstd, Encoding::Gzip],
            types: default_compressible_types(),
        }
    }
}

/// In-memory cache of small hot files.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheOptions {
    /// Total bytes held (bodies and compressed variants); 0 disables the cache.
    pub max_bytes: u64,
    /// Files larger than this are never cached, always streamed.
    pub max_file_size: u64,
}

impl Default for CacheOptions {
    /// 64 MiB in total, files up to 1 MiB.
    fn default() -> Self {
        CacheOptions {
            max_bytes: 64 << 20,
            max_file_size: 1 << 20,
        }
    }
}

/// Everything the file server needs from the site config.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    pub root: PathBuf,
    /// Paths tried in turn (`{path}` is the request's), the last one
    /// answering whatever it finds; `=404` answers that status. Empty: `{path}`.
    pub try_files: Vec<String>,
    pub index: Vec<String>,
    pub browse: bool,
    pub serve_hidden: bool,
    pub follow_symlinks: bool,
    pub precompressed: Vec<Encoding>,
    pub compress: CompressOptions,
    pub cache: CacheOptions,
}

impl Options {
    /// Defaults for `root`: index `index.html`, no listing, hidden files and
    /// outside symlinks refused, no sidecars, default compression and cache.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Options {
            root: root.into(),
            try_files: Vec::new(),
            index: vec!["index.html".to_owned()],
            browse: false,
            serve_hidden: false,
            follow_symlinks: false,
            precompressed: Vec::new(),
            compress: CompressOptions::default(),
            cache: CacheOptions::default(),
        }
    }
}

/// Default list of compressible types.
pub fn default_compressible_types() -> Vec<String> {
    [
        "text/*",
        "application/javascript",
        "application/x-javascript",
        "application/json",
        "application/ld+json",
        "application/manifest+json",
        "application/xml",
        "application/xhtml+xml",
        "application/rss+xml",
        "application/atom+xml",
        "application/wasm",
        "image/svg+xml",
        "image/x-icon",
        "image/vnd.microsoft.icon",
        "image/bmp",
        "font/ttf",
        "font/otf",
        "application/vnd.ms-fontobject",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect()
}
