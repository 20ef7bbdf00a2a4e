//! Certificate files reloaded when they change.
//!
//! Watches the directories of every configured `cert`/`key` pair (so that
//! atomic replacements and symlink swaps are seen), waits for writes to
//! settle, then loads the pair again. Never replaces the certificate in use
//! with one that failed to load: a bad file, or a key that does not match
//! its certificate, is logged with the file's name and the old certificate
//! stays.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;

use super::certs::Slot;

/// Writes closer together than this are taken as one change.
const SETTLE: Duration = Duration::from_millis(250);

/// One watched pair of files and where its certificate goes.
pub struct Pair {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub slot: Slot,
}

/// Keeps the watcher alive; dropping it stops reloading.
pub struct FileWatch {
    _watcher: notify::RecommendedWatcher,
}

/// Starts watching `pairs`, reloading them on `rt`.
pub fn watch(pairs: Vec<Pair>, rt: &tokio::runtime::Handle) -> Result<FileWatch, notify::Error> {
    let (tx, rx) = mpsc::unbounded_channel::<PathBuf>();
    let dirs: HashSet<PathBuf> = pairs
        .iter()
        .flat_map(|p| [dir_of(&p.cert), dir_of(&p.key)])
        .collect();
    // Only events about the files themselves matter (other files in the
    // directory, like a log, may change all the time), plus Kubernetes-style
    // `..data` symlink swaps and events on the directory itself.
    let files: HashSet<PathBuf> = pairs
        .iter()
        .flat_map(|p| [p.cert.clone(), p.key.clone()])
        .collect();
    let watched_dirs = dirs.clone();
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        if let Ok(ev) = res {
            for p in ev.paths {
                let relevant = files.contains(&p)
                    || watched_dirs.contains(&p)
                    || p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with(".."));
                if relevant {
                    let _ = tx.send(p);
                }
            }
        }
    })?;
    for d in &dirs {
        watcher.watch(d, RecursiveMode::NonRecursive)?;
    }
    rt.spawn(reload_loop(pairs, rx));
    Ok(FileWatch { _watcher: watcher })
}

fn dir_of(p: &Path) -> PathBuf {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

async fn reload_loop(pairs: Vec<Pair>, mut rx: mpsc::UnboundedReceiver<PathBuf>) {
    let pairs: Vec<Arc<Pair>> = pairs.into_iter().map(Arc::new).collect();
    // What each pair was last loaded from, to skip events that changed nothing.
    let mut last: HashMap<usize, (Vec<u8>, Vec<u8>)> = HashMap::new();
    for (i, p) in pairs.iter().enumerate() {
        if let (Ok(c), Ok(k)) = (std::fs::read(&p.cert), std::fs::read(&p.key)) {
            last.insert(i, (c, k));
        }
    }
    while let Some(first) = rx.recv().await {
        let mut changed = vec![first];
        // Let a burst of writes (cert, then key) settle, but not forever.
        let give_up = tokio::time::Instant::now() + SETTLE * 8;
        while tokio::time::Instant::now() < give_up {
            match tokio::time::timeout(SETTLE, rx.recv()).await {
                Ok(Some(p)) => changed.push(p),
                Ok(None) => return,
                Err(_) => break,
            }
        }
        let dirs: HashSet<PathBuf> = changed.iter().map(|p| dir_of(p)).collect();
        for (i, p) in pairs.iter().enumerate() {
            if !dirs.contains(&dir_of(&p.cert)) && !dirs.contains(&dir_of(&p.key)) {
                continue;
            }
            let (Ok(c), Ok(k)) = (std::fs::read(&p.cert), std::fs::read(&p.key)) else {
                // Mid-replacement, or deleted: the next event will tell.
                if !p.cert.exists() || !p.key.exists() {
                    tracing::warn!(
                        "certificate files {} / {} are missing; keeping the certificate in use",
                        p.cert.display(),
                        p.key.display()
                    );
                }
                continue;
            };
            if last.get(&i).is_some_and(|(lc, lk)| *lc == c && *lk == k) {
                continue;
            }
            match super::load_certified_key(&p.cert, &p.key) {
                Ok(key) => {
                    p.slot.store(Some(Arc::new(key)));
                    last.insert(i, (c, k));
                    tracing::info!("reloaded certificate {}", p.cert.display());
                }
                Err(e) => tracing::error!("{e}; keeping the certificate in use"),
            }
        }
    }
}
