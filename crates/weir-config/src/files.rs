//! What a static site is configured with: root, index files, listing,
//! precompressed sidecars, compression and the file cache, and the
//! compression a site or route applies to its other handlers' answers.
//! Plain data with its defaults; serving it is `weir_static`'s job, and
//! compressing other answers the server's response filter's.

use std::path::PathBuf;
use std::sync::Arc;

use crate::error::Collector;
use crate::raw::RawCompress;
use crate::units::parse_size;

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

/// `base` with what `raw` (a `compress` key, `true`/`false` already read as
/// its `enabled`) sets; `key` names it in errors.
pub(crate) fn compress(
    c: &mut Collector<'_>,
    key: &str,
    raw: &RawCompress,
    base: &CompressOptions,
) -> CompressOptions {
    let mut out = base.clone();
    // Writing `compress` at all turns it on, unless it says otherwise.
    out.enabled = raw.enabled.unwrap_or(true);
    if let Some(v) = &raw.min_size {
        match parse_size(v.get_ref()) {
            Ok(n) => out.min_size = n,
            Err(m) => c.at(v.span(), format!("{key}.min_size: {m}")),
        }
    }
    if let Some(e) = &raw.encodings {
        out.encodings = crate::parse_encodings(c, &format!("{key}.encodings"), e);
    }
    if let Some(t) = &raw.types {
        out.types = t.clone();
    }
    out
}

/// The compression of answers other than static files (proxied, apps,
/// FastCGI, cached, fixed answers) a site or route applies: off unless its
/// `compress` turns it on (as nginx's `gzip` and Caddy's `encode` are);
/// a route without `compress` has its site's (`inherited`), and a route's
/// table starts from it.
pub(crate) fn answer_compression(
    c: &mut Collector<'_>,
    key: &str,
    raw: Option<&RawCompress>,
    inherited: Option<&Arc<CompressOptions>>,
) -> Option<Arc<CompressOptions>> {
    let Some(raw) = raw else {
        return inherited.cloned();
    };
    let base = inherited.map_or_else(CompressOptions::default, |i| (**i).clone());
    let opts = compress(c, key, raw, &base);
    opts.enabled.then(|| Arc::new(opts))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Config, HandlerConfig, load_str};

    fn load(src: &str) -> Config {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("www")).unwrap();
        load_str("weir.toml", src, dir.path()).unwrap()
    }

    fn static_compress(h: &HandlerConfig) -> &CompressOptions {
        match h {
            HandlerConfig::Static(o) => &o.compress,
            other => panic!("not static: {other:?}"),
        }
    }

    fn routes(c: &Config) -> &[crate::routes::RouteConfig] {
        match &c.sites[0].handler {
            HandlerConfig::Routes { routes, .. } => routes,
            other => panic!("not routes: {other:?}"),
        }
    }

    #[test]
    fn compress_true_and_false_are_shorthands_like_cache() {
        let proxy = "[site.\"a\"]\nproxy = \"127.0.0.1:9001\"\n";
        // Other handlers' answers: off unless `compress` is written.
        assert!(load(proxy).sites[0].compress.is_none());
        let on = load(&format!("{proxy}compress = true\n"));
        assert_eq!(
            on.sites[0].compress.as_deref(),
            Some(&CompressOptions::default())
        );
        let table = load(&format!("{proxy}compress = {{ enabled = true }}\n"));
        assert_eq!(table.sites[0].compress, on.sites[0].compress);
        let json = load(&format!(
            "{proxy}compress = {{ min_size = \"2KiB\", types = [\"application/json\"] }}\n"
        ));
        let opts = json.sites[0].compress.as_deref().unwrap();
        assert_eq!(
            (opts.min_size, &opts.types[..]),
            (2048, &["application/json".to_string()][..])
        );
        assert!(
            load(&format!("{proxy}compress = false\n")).sites[0]
                .compress
                .is_none()
        );
        assert!(
            load(&format!("{proxy}compress = {{ enabled = false }}\n")).sites[0]
                .compress
                .is_none()
        );

        // Static files: compressed unless `compress` turns it off.
        let root = "[site.\"a\"]\nroot = \"www\"\n";
        assert!(static_compress(&load(root).sites[0].handler).enabled);
        assert!(load(root).sites[0].compress.is_none());
        let off = load(&format!("{root}compress = false\n"));
        assert!(!static_compress(&off.sites[0].handler).enabled);
        let on = load(&format!("{root}compress = true\n"));
        assert!(static_compress(&on.sites[0].handler).enabled);
        assert!(on.sites[0].compress.is_some());
    }

    #[test]
    fn a_route_has_its_sites_compression_unless_it_says_otherwise() {
        let c = load(
            "[site.\"a\"]\ncompress = { types = [\"application/json\"] }\n\
             [[site.\"a\".route]]\npath = \"/same/*\"\nproxy = \"127.0.0.1:1\"\n\
             [[site.\"a\".route]]\npath = \"/off/*\"\nproxy = \"127.0.0.1:1\"\ncompress = false\n\
             [[site.\"a\".route]]\npath = \"/big/*\"\nproxy = \"127.0.0.1:1\"\ncompress = { min_size = \"10KiB\" }\n\
             [[site.\"a\".route]]\npath = \"/files/*\"\nroot = \"www\"\ncompress = false\n",
        );
        let r = routes(&c);
        assert_eq!(r[0].compress, c.sites[0].compress);
        assert!(r[1].compress.is_none());
        // A table's unset keys are the site's.
        let big = r[2].compress.as_deref().unwrap();
        assert_eq!(big.min_size, 10 << 10);
        assert_eq!(big.types, ["application/json"]);
        // A route's `compress` covers its files too.
        assert!(!static_compress(&r[3].handler).enabled);

        // A site without `compress`: a route turns it on for itself alone.
        let c = load(
            "[site.\"a\"]\nproxy = \"127.0.0.1:1\"\n\
             [[site.\"a\".route]]\npath = \"/api/*\"\nproxy = \"127.0.0.1:2\"\ncompress = true\n",
        );
        assert!(c.sites[0].compress.is_none());
        assert_eq!(
            routes(&c)[0].compress.as_deref(),
            Some(&CompressOptions::default())
        );
    }

    #[test]
    fn compress_mistakes_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let err = |src: &str| {
            load_str("weir.toml", src, dir.path())
                .unwrap_err()
                .to_string()
        };
        let e = err("[site.\"a\"]\nproxy = \"127.0.0.1:1\"\ncompress = 3\n");
        assert!(e.contains("true, false or a table"), "{e}");
        let e = err(
            "[site.\"a\"]\nproxy = \"127.0.0.1:1\"\n[[site.\"a\".route]]\npath = \"/x\"\n\
             proxy = \"127.0.0.1:1\"\ncompress = { min_sise = \"1KiB\" }\n",
        );
        assert!(e.contains("did you mean `min_size`"), "{e}");
        let e = err(
            "[site.\"a\"]\nproxy = \"127.0.0.1:1\"\ncompress = { encodings = [\"deflate\"] }\n",
        );
        assert!(
            e.contains("compress.encodings: `deflate` is unknown"),
            "{e}"
        );
    }
}
