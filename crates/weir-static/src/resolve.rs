//! The file-system side of a cache miss: mapping a normalised path to a
//! file, index file, directory or refusal, and reading or opening it; plus
//! the bounded-memory streaming of large files.
//!
//! Owns the symlink policy (canonical path must stay under the canonical
//! root unless `follow_symlinks`), the hidden check on the resolved path,
//! and the "headers and body come from the same version" rule: small files
//! are read whole and described from the bytes read, large files are
//! described by `fstat` of the very descriptor they are streamed from.
//! Everything here except [`file_body`] blocks and must only run under
//! `spawn_blocking`; nothing here builds HTTP responses.

use std::collections::VecDeque;
use std::fs::{File, Metadata};
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use super::Encoding;
use super::cache::Fingerprint;
use super::path::is_hidden_name;

/// Read size for streamed files: big enough to amortise the blocking-pool
/// hop, small enough to keep memory per connection bounded.
pub const CHUNK: usize = 128 * 1024;

/// Settings the blocking side needs, shared cheaply across misses.
pub struct Resolver {
    pub root: PathBuf,
    pub index: Vec<String>,
    pub serve_hidden: bool,
    pub follow_symlinks: bool,
    pub precompressed: Vec<Encoding>,
    /// Files up to this size are read whole (and cached); 0 = never.
    pub small_max: u64,
}

/// A small file read whole, with what it depends on.
pub struct SmallFile {
    pub name: String,
    pub data: Bytes,
    /// The open file, kept for `sendfile` when `data` is large enough
    /// (`server::zero_copy`).
    pub file: Option<Arc<File>>,
    pub meta: Metadata,
    /// Sidecars found, in `precompressed` order.
    pub sidecars: Vec<(Encoding, Bytes, Metadata)>,
    /// The file did not change while it was read.
    pub stable: bool,
    /// Reached through a symlink: inotify on the root may not see changes.
    pub via_symlink: bool,
    pub deps: Vec<(PathBuf, Option<Fingerprint>)>,
}

/// A large file opened for streaming.
pub struct LargeFile {
    pub name: String,
    pub file: File,
    pub meta: Metadata,
    /// A sidecar the client accepts, opened, when one exists.
    pub sidecar: Option<(Encoding, File, Metadata)>,
    /// Some sidecar exists (so the response varies on Accept-Encoding).
    pub any_sidecar: bool,
}

pub enum Resolved {
    NotFound,
    Forbidden,
    /// A directory asked for without its trailing slash.
    Redirect,
    /// A directory without index file, `browse` on.
    Listing(PathBuf),
    Small(Box<SmallFile>),
    Large(Box<LargeFile>),
}

fn from_io(e: &io::Error) -> Resolved {
    match e.kind() {
        io::ErrorKind::PermissionDenied => Resolved::Forbidden,
        _ => Resolved::NotFound,
    }
}

impl Resolver {
    /// Canonicalises `path` and applies the symlink and hidden policies.
    fn check(&self, path: &Path) -> Result<(PathBuf, bool), Resolved> {
        let canon = std::fs::canonicalize(path).map_err(|e| from_io(&e))?;
        let Ok(rel) = canon.strip_prefix(&self.root) else {
            if self.follow_symlinks {
                return Ok((canon, true));
            }
            return Err(Resolved::NotFound);
        };
        // A link inside the root to a hidden file must not reveal it.
        if !self.serve_hidden
            && rel
                .components()
                .any(|c| c.as_os_str().to_str().is_none_or(is_hidden_name))
        {
            return Err(Resolved::NotFound);
        }
        let via_symlink = canon != path;
        Ok((canon, via_symlink))
    }

    /// Resolves `key` (from [`super::path::normalize`]). `accepted` lists the
    /// sidecar codings the client takes, best first (empty for ranges).
    pub fn resolve(&self, key: &str, accepted: &[Encoding]) -> Resolved {
        let mut path = self.root.clone();
        for seg in key.split('/').filter(|s| !s.is_empty()) {
            path.push(seg);
        }
        let (canon, via) = match self.check(&path) {
            Ok(x) => x,
            Err(r) => return r,
        };
        let md = match std::fs::metadata(&canon) {
            Ok(md) => md,
            Err(e) => return from_io(&e),
        };
        let trailing = key.ends_with('/');
        if md.is_dir() {
            if !trailing {
                return Resolved::Redirect;
            }
            let mut deps = Vec::new();
            for idx in &self.index {
                let p = path.join(idx);
                match std::fs::metadata(&p) {
                    Ok(m) if m.is_file() => {
                        let (c, v) = match self.check(&p) {
                            Ok(x) => x,
                            Err(r) => return r,
                        };
                        return self.load(idx.clone(), &p, &c, via || v, deps, accepted);
                    }
                    Ok(_) => {}
                    // Created later, this index would win: it is a dependency.
                    Err(_) => deps.push((p, None)),
                }
            }
            return Resolved::Listing(canon);
        }
        if !md.is_file() {
            return Resolved::Forbidden;
        }
        if trailing {
            return Resolved::NotFound;
        }
        let name = key.rsplit('/').next().unwrap_or_default().to_owned();
        self.load(name, &path, &canon, via, Vec::new(), accepted)
    }

    /// Opens a sidecar of `path` if it exists, is a regular file and passes
    /// the symlink policy.
    fn sidecar(&self, path: &Path, enc: Encoding) -> Option<(PathBuf, File, Metadata)> {
        let mut s = path.as_os_str().to_owned();
        s.push(enc.extension());
        let p = PathBuf::from(s);
        let (canon, _) = self.check(&p).ok()?;
        let f = File::open(&canon).ok()?;
        let md = f.metadata().ok()?;
        md.is_file().then_some((p, f, md))
    }

    fn load(
        &self,
        name: String,
        path: &Path,
        canon: &Path,
        via_symlink: bool,
        mut deps: Vec<(PathBuf, Option<Fingerprint>)>,
        accepted: &[Encoding],
    ) -> Resolved {
        let file = match File::open(canon) {
            Ok(f) => f,
            Err(e) => return from_io(&e),
        };
        let meta = match file.metadata() {
            Ok(m) if m.is_file() => m,
            Ok(_) => return Resolved::Forbidden,
            Err(e) => return from_io(&e),
        };
        if meta.len() <= self.small_max {
            let Ok((data, stable, meta)) = read_whole(&file, &meta, self.small_max) else {
                return Resolved::NotFound;
            };
            if let Some(data) = data {
                deps.push((path.to_path_buf(), Some(Fingerprint::of(&meta))));
                let mut sidecars = Vec::new();
                for &enc in &self.precompressed {
                    let mut sp = path.as_os_str().to_owned();
                    sp.push(enc.extension());
                    let sp = PathBuf::from(sp);
                    match self.sidecar(path, enc) {
                        Some((_, f, m)) => {
                            match read_whole(&f, &m, self.small_max) {
                                Ok((Some(b), true, m2)) => {
                                    deps.push((sp, Some(Fingerprint::of(&m2))));
                                    sidecars.push((enc, b, m2));
                                }
                                // Too big to hold or changing under us: not
                                // served while the original is cached.
                                _ => deps.push((sp, Some(Fingerprint::of(&m)))),
                            }
                        }
                        None => deps.push((sp, None)),
                    }
                }
                let file = (stable && data.len() >= weir_http::file_region::MIN_LEN)
                    .then(|| Arc::new(file));
                return Resolved::Small(Box::new(SmallFile {
                    name,
                    data,
                    file,
                    meta,
                    sidecars,
                    stable,
                    via_symlink,
                    deps,
                }));
            }
            // Grew past the limit while we looked: stream it instead.
        }
        let meta = match file.metadata() {
            Ok(m) => m,
            Err(e) => return from_io(&e),
        };
        let mut any_sidecar = false;
        let mut sidecar = None;
        for &enc in &self.precompressed {
            if let Some((_, f, m)) = self.sidecar(path, enc) {
                any_sidecar = true;
                let rank = accepted.iter().position(|&a| a == enc);
                let better = match (&sidecar, rank) {
                    (_, None) => false,
                    (None, Some(_)) => true,
                    (Some((cur, _, _)), Some(r)) => {
                        r < accepted.iter().position(|a| a == cur).unwrap_or(usize::MAX)
                    }
                };
                if better {
                    sidecar = Some((enc, f, m));
                }
            }
        }
        Resolved::Large(Box::new(LargeFile {
            name,
            file,
            meta,
            sidecar,
            any_sidecar,
        }))
    }
}

/// Reads an open file whole if it is at most `max` bytes. Returns the
/// bytes (`None` if it turned out larger), whether `fstat` before and after
/// agree, and the metadata after.
fn read_whole(
    file: &File,
    before: &Metadata,
    max: u64,
) -> io::Result<(Option<Bytes>, bool, Metadata)> {
    let mut buf = Vec::with_capacity(before.len() as usize + 1);
    file.take(max + 1).read_to_end(&mut buf)?;
    let after = file.metadata()?;
    if buf.len() as u64 > max {
        return Ok((None, false, after));
    }
    let stable =
        Fingerprint::of(before) == Fingerprint::of(&after) && buf.len() as u64 == after.len();
    Ok((Some(Bytes::from(buf)), stable, after))
}

/// One piece of a streamed body: literal bytes (multipart framing) or a
/// byte span of the file.
pub enum Segment {
    Bytes(Bytes),
    File { start: u64, len: u64 },
}

/// Streams `segments`, reading file spans in [`CHUNK`]-sized positional
/// reads on the blocking pool. A file that shrinks or changes mid-stream
/// (its `fstat` no longer matches `fp`, the one the headers came from) ends
/// the body with an error, so the connection is cut instead of delivering a
/// body that doesn't match its Content-Length or ETag.
pub fn file_body(
    file: File,
    fp: Fingerprint,
    segments: Vec<Segment>,
) -> impl futures_util::Stream<Item = io::Result<Bytes>> + Send {
    let state = (Arc::new(file), VecDeque::from(segments));
    futures_util::stream::try_unfold(state, move |(file, mut segs)| async move {
        loop {
            let Some(seg) = segs.pop_front() else {
                return Ok(None);
            };
            match seg {
                Segment::Bytes(b) => return Ok(Some((b, (file, segs)))),
                Segment::File { len: 0, .. } => continue,
                Segment::File { start, len } => {
                    let want = len.min(CHUNK as u64) as usize;
                    let f = Arc::clone(&file);
                    let chunk = tokio::task::spawn_blocking(move || {
                        let mut buf = BytesMut::zeroed(want);
                        let mut got = 0;
                        while got < want {
                            let n = f.read_at(&mut buf[got..], start + got as u64)?;
                            if n == 0 {
                                return Err(io::Error::new(
                                    io::ErrorKind::UnexpectedEof,
                                    "file shrank while being sent",
                                ));
                            }
                            got += n;
                        }
                        if Fingerprint::of(&f.metadata()?) != fp {
                            return Err(io::Error::other("file changed while being sent"));
                        }
                        Ok(buf.freeze())
                    })
                    .await
                    .map_err(io::Error::other)??;
                    let n = chunk.len() as u64;
                    if n < len {
                        segs.push_front(Segment::File {
                            start: start + n,
                            len: len - n,
                        });
                    }
                    return Ok(Some((chunk, (file, segs))));
                }
            }
        }
    })
}
