//! The disk store (`[cache] disk`): every complete stored response is also
//! written to a file of its own, so the cache survives a restart and holds
//! more than memory does. Files are written on the blocking pool (a
//! temporary file renamed into place, so a crash never leaves half an
//! entry) and indexed in a byte-bounded moka map like the memory store's;
//! an entry the bound evicts loses its file. At start the directory is
//! read back on a thread of its own, so a large store never delays serving.
//!
//! The file is the response's head as text, then its body:
//!
//! ```text
//! weir-cache 1
//! key http://example.com/a
//! status 200
//! fresh <lifetime> <initial age> <response time> <swr> <sie> <forbids stale> <no-cache>
//! extra <hex>
//! vary <name> <hex value>
//! tag <tag>
//!
//! <field>: <value>\r\n ... \r\n
//! <body>
//! ```
//!
//! Never serves a request: the store reads a body back into memory when a
//! request needs it.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use http::StatusCode;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use moka::notification::RemovalCause;

use crate::object::{Entry, Expire, ObjBody, Object, OnDisk};
use crate::rules::Freshness;

const MAGIC: &str = "weir-cache 1\n";
/// Heads longer than this are not read back (a file that is not ours).
const MAX_HEAD: usize = 256 * 1024;

/// The disk store's index and directory.
pub struct Disk {
    dir: PathBuf,
    pub(crate) index: moka::sync::Cache<Arc<str>, Arc<Entry>>,
}

fn files_of(e: &Entry) -> impl Iterator<Item = &Path> {
    e.variants.iter().filter_map(|o| match &o.body {
        ObjBody::OnDisk(d) => Some(d.path.as_path()),
        _ => None,
    })
}

impl Disk {
    /// Opens (creating) the store at `dir`, bounded to `size` bytes; its
    /// existing files are indexed in the background.
    pub fn open(dir: &Path, size: u64) -> std::io::Result<Arc<Disk>> {
        std::fs::create_dir_all(dir)?;
        let index = moka::sync::Cache::builder()
            .max_capacity(size)
            .weigher(|_: &Arc<str>, e: &Arc<Entry>| {
                let w: u64 = e
                    .variants
                    .iter()
                    .map(|o| match &o.body {
                        ObjBody::OnDisk(d) => d.offset + d.len,
                        _ => 0,
                    })
                    .sum();
                w.min(u32::MAX as u64) as u32
            })
            .expire_after(Expire)
            .eviction_listener(|_, e: Arc<Entry>, cause| {
                // A replaced entry's files live on in its successor (the
                // store removes the ones it drops itself).
                if cause != RemovalCause::Replaced {
                    for p in files_of(&e) {
                        let _ = std::fs::remove_file(p);
                    }
                }
            })
            .build();
        let disk = Arc::new(Disk {
            dir: dir.to_path_buf(),
            index,
        });
        let d = disk.clone();
        std::thread::Builder::new()
            .name("weir-cache-disk".into())
            .spawn(move || d.load_all())?;
        Ok(disk)
    }

    fn path_for(&self, primary: &str, obj: &Object) -> PathBuf {
        let mut id = Vec::with_capacity(primary.len() + 64);
        id.extend_from_slice(primary.as_bytes());
        id.push(0);
        id.extend_from_slice(obj.extra.as_bytes());
        for (n, v) in obj.vary.iter() {
            id.push(0);
            id.extend_from_slice(n.as_str().as_bytes());
            id.push(0);
            id.extend_from_slice(v.as_bytes());
        }
        let h = format!("{:016x}", weir_http::hash::stable_hash(&id));
        self.dir.join(&h[..2]).join(h)
    }

    /// Writes a complete response to disk and indexes it (on the blocking
    /// pool: call through `spawn_blocking`).
    pub fn write(&self, primary: &Arc<str>, obj: &Object, body: &Bytes) -> std::io::Result<()> {
        let path = self.path_for(primary, obj);
        let mut head = String::with_capacity(512);
        head.push_str(MAGIC);
        head.push_str(&format!("key {primary}\nstatus {}\n", obj.status.as_u16()));
        let f = &obj.fresh;
        head.push_str(&format!(
            "fresh {} {} {} {} {} {} {}\n",
            f.lifetime,
            f.initial_age,
            f.response_time,
            f.swr,
            f.sie,
            u8::from(f.forbids_stale),
            u8::from(f.no_cache)
        ));
        head.push_str(&format!("extra {}\n", hex(obj.extra.as_bytes())));
        for (n, v) in obj.vary.iter() {
            head.push_str(&format!("vary {} {}\n", n, hex(v.as_bytes())));
        }
        for t in obj.tags.iter() {
            head.push_str(&format!("tag {t}\n"));
        }
        head.push('\n');
        let mut bytes = head.into_bytes();
        for (k, v) in &obj.headers {
            bytes.extend_from_slice(k.as_str().as_bytes());
            bytes.extend_from_slice(b": ");
            bytes.extend_from_slice(v.as_bytes());
            bytes.extend_from_slice(b"\r\n");
        }
        bytes.extend_from_slice(b"\r\n");
        let offset = bytes.len() as u64;
        std::fs::create_dir_all(path.parent().expect("two levels under dir"))?;
        let tmp = path.with_extension("tmp");
        {
            let mut file = std::fs::File::create(&tmp)?;
            file.write_all(&bytes)?;
            file.write_all(body)?;
        }
        std::fs::rename(&tmp, &path)?;
        let on_disk = Object {
            status: obj.status,
            headers: obj.headers.clone(),
            fresh: obj.fresh,
            vary: obj.vary.clone(),
            extra: obj.extra.clone(),
            tags: obj.tags.clone(),
            etag: obj.etag.clone(),
            last_modified: obj.last_modified,
            body: ObjBody::OnDisk(Arc::new(OnDisk {
                path,
                offset,
                len: body.len() as u64,
            })),
            file: None,
        };
        self.index_one(primary.clone(), Arc::new(on_disk));
        Ok(())
    }

    fn index_one(&self, primary: Arc<str>, obj: Arc<Object>) {
        let e = Entry::adding(self.index.get(&primary).as_deref(), obj);
        self.index.insert(primary, Arc::new(e));
    }

    /// The body of a response on disk, and the open file it came from (for
    /// `sendfile`), read on the blocking pool.
    pub fn read_body(d: &OnDisk) -> std::io::Result<(Bytes, std::fs::File)> {
        use std::io::{Seek, SeekFrom};
        let mut f = std::fs::File::open(&d.path)?;
        f.seek(SeekFrom::Start(d.offset))?;
        let mut buf = vec![0u8; d.len as usize];
        f.read_exact(&mut buf)?;
        Ok((Bytes::from(buf), f))
    }

    /// Removes a URL's responses and their files; how many.
    pub fn purge(&self, primary: &str) -> usize {
        match self.index.remove(primary) {
            Some(e) => {
                for p in files_of(&e) {
                    let _ = std::fs::remove_file(p);
                }
                e.variants.len()
            }
            None => 0,
        }
    }

    /// Removes the responses for which `f` holds; how many.
    pub fn purge_where(&self, f: &mut dyn FnMut(&str, &Object) -> bool) -> usize {
        let mut n = 0;
        for (k, e) in self.index.iter() {
            let (gone, keep): (Vec<_>, Vec<_>) = e.variants.iter().cloned().partition(|o| f(&k, o));
            if gone.is_empty() {
                continue;
            }
            n += gone.len();
            for p in files_of(&Entry { variants: gone }) {
                let _ = std::fs::remove_file(p);
            }
            if keep.is_empty() {
                self.index.invalidate(&*k);
            } else {
                self.index
                    .insert((*k).clone(), Arc::new(Entry { variants: keep }));
            }
        }
        n
    }

    /// (URLs, bytes) on disk.
    pub fn size(&self) -> (u64, u64) {
        self.index.run_pending_tasks();
        (self.index.entry_count(), self.index.weighted_size())
    }

    /// Indexes the files already in the directory; removes what is
    /// half-written, unreadable or past use.
    fn load_all(&self) {
        let now = crate::now();
        let mut loaded = 0u64;
        let Ok(top) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for sub in top.flatten() {
            let Ok(files) = std::fs::read_dir(sub.path()) else {
                continue;
            };
            for f in files.flatten() {
                let path = f.path();
                if path.extension().is_some_and(|e| e == "tmp") {
                    let _ = std::fs::remove_file(&path);
                    continue;
                }
                match read_head(&path) {
                    Some((key, obj)) if obj.retain_until() >= now => {
                        self.index_one(Arc::from(key), Arc::new(obj));
                        loaded += 1;
                    }
                    _ => {
                        let _ = std::fs::remove_file(&path);
                    }
                }
            }
        }
        if loaded > 0 {
            tracing::info!(responses = loaded, dir = %self.dir.display(), "cache: disk store read back");
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

/// Reads a stored file's head: its key and the response without its body.
fn read_head(path: &Path) -> Option<(String, Object)> {
    let mut f = std::fs::File::open(path).ok()?;
    let total = f.metadata().ok()?.len();
    let mut buf = vec![0u8; MAX_HEAD.min(total as usize)];
    f.read_exact(&mut buf).ok()?;
    let text_end = buf.windows(2).position(|w| w == b"\n\n")? + 2;
    let text = std::str::from_utf8(&buf[..text_end]).ok()?;
    let mut lines = text.lines();
    if lines.next()? != MAGIC.trim_end() {
        return None;
    }
    let (mut key, mut status, mut fresh, mut extra) = (None, None, None, String::new());
    let (mut vary, mut tags) = (Vec::new(), Vec::new());
    for l in lines {
        let (k, v) = match l.split_once(' ') {
            Some(kv) => kv,
            None => continue,
        };
        match k {
            "key" => key = Some(v.to_string()),
            "status" => status = StatusCode::from_u16(v.parse().ok()?).ok(),
            "fresh" => {
                let n: Vec<u64> = v.split(' ').filter_map(|x| x.parse().ok()).collect();
                if n.len() != 7 {
                    return None;
                }
                fresh = Some(Freshness {
                    lifetime: n[0],
                    initial_age: n[1],
                    response_time: n[2],
                    swr: n[3],
                    sie: n[4],
                    forbids_stale: n[5] == 1,
                    no_cache: n[6] == 1,
                });
            }
            "extra" => extra = unhex(v)?,
            "vary" => {
                let (n, val) = v.split_once(' ')?;
                vary.push((HeaderName::from_bytes(n.as_bytes()).ok()?, unhex(val)?));
            }
            "tag" => tags.push(Box::from(v)),
            _ => {}
        }
    }
    // The fields, then the body.
    let rest = &buf[text_end..];
    let fields_end = if rest.starts_with(b"\r\n") {
        2
    } else {
        rest.windows(4).position(|w| w == b"\r\n\r\n")? + 4
    };
    let mut headers = HeaderMap::new();
    for line in rest[..fields_end].split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            continue;
        }
        let colon = line.iter().position(|&b| b == b':')?;
        let name = HeaderName::from_bytes(&line[..colon]).ok()?;
        let value = HeaderValue::from_bytes(
            line[colon + 1..]
                .strip_prefix(b" ")
                .unwrap_or(&line[colon + 1..]),
        )
        .ok()?;
        headers.append(name, value);
    }
    let offset = (text_end + fields_end) as u64;
    let obj = Object {
        status: status?,
        etag: headers.get(http::header::ETAG).cloned(),
        last_modified: crate::rules::last_modified(&headers),
        headers,
        fresh: fresh?,
        vary: vary.into(),
        extra: extra.into(),
        tags: tags.into(),
        body: ObjBody::OnDisk(Arc::new(OnDisk {
            path: path.to_path_buf(),
            offset,
            len: total.checked_sub(offset)?,
        })),
        file: None,
    };
    Some((key?, obj))
}
