//! The storage directory: ACME accounts, certificates and keys, the local CA.
//!
//! Owns the layout on disk and how files get there. Every write is atomic
//! (a temporary file in the same directory, fsync, rename), files are 0600
//! and directories 0700, and a per-name lock file lets two weir processes
//! sharing one directory take turns instead of both ordering the same
//! certificate. Never leaves a half-written file where a reader may find it;
//! never deletes anything it did not write.
//!
//! In a cluster ([`share`]), the same files live in Redis too: taking a
//! lock takes the cluster's lock as well and first brings in what the
//! other processes stored, and every write is handed on to them; so N
//! processes order a name once, whichever machine they run on.
//!
//! Layout:
//! - `acme/<directory host>/account.json`: the ACME account credentials
//! - `certs/<issuer>/<name>/{cert.pem,key.pem}`: certificates and keys
//! - `local-ca/{root,intermediate}.{pem,key}`: the local CA
//! - `locks/<name>.lock`: lock files

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("storage {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> StorageError + '_ {
    move |source| StorageError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A storage directory.
#[derive(Debug, Clone)]
pub struct Storage {
    root: PathBuf,
    shared: Option<Arc<dyn Shared>>,
}

/// Held while a name is being worked on; the lock is released on drop
/// (the cluster's after the file's, and after the writes made under it).
pub struct StorageLock {
    _file: File,
    _shared: Option<Box<dyn Send + Sync>>,
}

impl std::fmt::Debug for StorageLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StorageLock").finish_non_exhaustive()
    }
}

/// Storage the processes of a cluster share. Blocking: called from
/// blocking threads only (as [`Storage::lock`] is).
pub trait Shared: Send + Sync + std::fmt::Debug {
    /// The cluster-wide lock for `name`, waiting while another process
    /// holds it; released when the guard drops. Never fails: when the
    /// cluster is out of reach it says so and the local lock alone holds.
    fn lock(&self, name: &str) -> Option<Box<dyn Send + Sync>>;
    /// Writes into `into` (with [`Storage::write_local`]) what the other
    /// processes stored that differs here.
    fn pull(&self, into: &Storage);
    /// Hands a file written here to the others; queued, returns at once.
    fn push(&self, rel: &str, data: &[u8]);
    /// `storage` was opened here: what it holds and the others lack is
    /// handed to them (and again whenever the cluster lost it); queued,
    /// returns at once.
    fn opened(&self, storage: &Storage);
    /// Tells the others to answer (or stop answering) an ACME challenge;
    /// the receiver resolves once it is sent (or cannot be).
    fn announce(&self, c: Challenge) -> tokio::sync::oneshot::Receiver<()>;
}

/// An ACME challenge answer shared by the process that orders, so that
/// whichever instance the CA's validation reaches can answer it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Challenge {
    Http {
        token: String,
        key_auth: String,
    },
    /// The key authorization's digest: each process makes its own
    /// TLS-ALPN-01 certificate from it.
    Alpn {
        name: String,
        digest: Vec<u8>,
    },
    HttpDone {
        token: String,
    },
    AlpnDone {
        name: String,
    },
}

static SHARED: OnceLock<Arc<dyn Shared>> = OnceLock::new();

/// Shares every storage directory the process opens from now on with the
/// cluster (once per process: a process is one member of a cluster).
pub fn share(s: Arc<dyn Shared>) {
    let _ = SHARED.set(s);
}

impl Storage {
    /// The default directory: `$XDG_DATA_HOME/weir` (`~/.local/share/weir`),
    /// else `./weir-data` when the system has no data directory.
    pub fn default_dir() -> PathBuf {
        weir_config::default_storage_dir()
    }

    /// Opens (creating with mode 0700 if needed) the directory at `root`.
    pub fn open(root: &Path) -> Result<Storage, StorageError> {
        mkdir(root)?;
        let s = Storage {
            root: root.to_path_buf(),
            shared: SHARED.get().cloned(),
        };
        if let Some(sh) = &s.shared {
            sh.opened(&s);
        }
        Ok(s)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// Reads a file; `Ok(None)` when it does not exist.
    pub fn read(&self, rel: &str) -> Result<Option<Vec<u8>>, StorageError> {
        let p = self.path(rel);
        match fs::read(&p) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err(&p)(e)),
        }
    }

    /// Writes a file atomically with mode 0600, creating parent directories
    /// with mode 0700; in a cluster, hands it to the other processes too.
    pub fn write(&self, rel: &str, data: &[u8]) -> Result<(), StorageError> {
        self.write_local(rel, data)?;
        if let Some(s) = &self.shared {
            s.push(rel, data);
        }
        Ok(())
    }

    /// Writes a file here only (what the cluster brings in).
    pub fn write_local(&self, rel: &str, data: &[u8]) -> Result<(), StorageError> {
        let p = self.path(rel);
        let dir = p.parent().unwrap_or(&self.root).to_path_buf();
        mkdir(&dir)?;
        let tmp = dir.join(format!(
            ".{}.tmp-{}-{}",
            p.file_name().and_then(|n| n.to_str()).unwrap_or("f"),
            std::process::id(),
            rand::random::<u32>()
        ));
        let result = (|| {
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(data)?;
            f.sync_all()?;
            fs::rename(&tmp, &p)?;
            // Make the rename itself durable.
            if let Ok(d) = File::open(&dir) {
                let _ = d.sync_all();
            }
            Ok(())
        })();
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result.map_err(io_err(&p))
    }

    /// Tells the other processes of the cluster about a challenge this one
    /// answers, and waits (briefly) until it is sent; nothing without one.
    pub async fn announce(&self, c: Challenge) {
        if let Some(s) = &self.shared {
            let sent = s.announce(c);
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), sent).await;
        }
    }

    /// Names of the sub-directories of `rel` (empty when it does not exist).
    pub fn list_dirs(&self, rel: &str) -> Vec<String> {
        let Ok(rd) = fs::read_dir(self.path(rel)) else {
            return Vec::new();
        };
        rd.filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().into_string().ok())
            .collect()
    }

    /// Takes the lock for `name`, waiting for another process that holds it.
    /// Blocking: call it from `spawn_blocking` on async paths.
    pub fn lock(&self, name: &str) -> Result<StorageLock, StorageError> {
        let p = self.path(&format!("locks/{}.lock", safe_name(name)));
        if let Some(d) = p.parent() {
            mkdir(d)?;
        }
        let f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&p)
            .map_err(io_err(&p))?;
        fs4::FileExt::lock(&f).map_err(io_err(&p))?;
        let shared = self.shared.as_ref().and_then(|s| {
            let g = s.lock(name);
            s.pull(self);
            g
        });
        Ok(StorageLock {
            _file: f,
            _shared: shared,
        })
    }

    /// Where the certificate of `name` from `issuer` lives, relative to the root.
    pub fn cert_dir(issuer: &str, name: &str) -> String {
        format!("certs/{}/{}", safe_name(issuer), safe_name(name))
    }
}

/// A name made safe as one path component: `*` becomes `_`, anything but
/// letters, digits, `.`, `-` and `_` becomes `-`, and no leading dot.
pub fn safe_name(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| match c {
            '*' => '_',
            c if c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_' => {
                c.to_ascii_lowercase()
            }
            _ => '-',
        })
        .collect();
    while s.starts_with('.') {
        s.replace_range(0..1, "_");
    }
    if s.is_empty() {
        s.push('_');
    }
    s
}

fn mkdir(p: &Path) -> Result<(), StorageError> {
    match fs::DirBuilder::new().recursive(true).mode(0o700).create(p) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io_err(p)(e)),
    }
    // An existing directory may have been made by someone else with a wider mode.
    let meta = fs::metadata(p).map_err(io_err(p))?;
    if meta.permissions().mode() & 0o077 != 0 {
        let _ = fs::set_permissions(p, fs::Permissions::from_mode(0o700));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_atomic_and_private() {
        let dir = tempfile::tempdir().unwrap();
        let s = Storage::open(&dir.path().join("st")).unwrap();
        s.write("certs/acme/a.example/cert.pem", b"one").unwrap();
        s.write("certs/acme/a.example/cert.pem", b"two").unwrap();
        assert_eq!(
            s.read("certs/acme/a.example/cert.pem").unwrap().unwrap(),
            b"two"
        );
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&s.path("certs/acme/a.example/cert.pem")), 0o600);
        assert_eq!(mode(&s.path("certs/acme/a.example")), 0o700);
        assert_eq!(mode(s.root()), 0o700);
        // No temporary file is left behind.
        let names: Vec<_> = fs::read_dir(s.path("certs/acme/a.example"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        assert_eq!(s.read("nope").unwrap(), None);
        assert_eq!(s.list_dirs("certs/acme"), vec!["a.example".to_string()]);
    }

    #[test]
    fn names_cannot_escape_the_directory() {
        assert_eq!(safe_name("*.example.com"), "_.example.com");
        assert_eq!(safe_name("../../etc"), "_.-..-etc");
        assert_eq!(safe_name("A.Example"), "a.example");
    }

    #[test]
    fn lock_is_exclusive_between_handles() {
        let dir = tempfile::tempdir().unwrap();
        let s = Storage::open(dir.path()).unwrap();
        let held = s.lock("a.example").unwrap();
        let p = s.path("locks/a.example.lock");
        let other = File::open(&p).unwrap();
        assert!(fs4::FileExt::try_lock(&other).is_err());
        drop(held);
        assert!(fs4::FileExt::try_lock(&other).is_ok());
    }
}
