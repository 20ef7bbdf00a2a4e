//! A stored response: its head, freshness, the request values that select
//! it, its tags, and its body, complete, still arriving ([`Fill`]) or on
//! disk; and the entry holding a URL's responses, one per variant.
//!
//! A body still arriving is shared: the one upstream response feeds every
//! client reading it, each at its own pace ([`FillReader`]). Never reads a
//! socket itself (the fetch pumps into it) and never decides freshness.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::StatusCode;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http_body::{Frame, SizeHint};
use weir_http::body::BodyError;

use crate::rules::Freshness;

/// One stored response.
pub struct Object {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub fresh: Freshness,
    /// The varying fields and the values of the request that stored it.
    pub vary: Box<[(HeaderName, String)]>,
    /// The policy's extra key fields of that request ([`crate::key::policy_extra`]).
    pub extra: Box<str>,
    pub tags: Box<[Box<str>]>,
    pub etag: Option<HeaderValue>,
    /// `Last-Modified`, seconds since the epoch.
    pub last_modified: Option<u64>,
    pub body: ObjBody,
    /// The file a complete body was read back from and the body's offset
    /// in it, for `sendfile` (large bodies only: each holds a descriptor).
    pub file: Option<(Arc<std::fs::File>, u64)>,
}

pub enum ObjBody {
    Complete(Bytes),
    Filling(Arc<Fill>),
    /// In the disk store only: read back into memory before it is served.
    OnDisk(Arc<OnDisk>),
}

/// Where a stored body lies on disk.
pub struct OnDisk {
    pub path: std::path::PathBuf,
    pub offset: u64,
    pub len: u64,
}

impl Object {
    /// Whether this response is the variant `req` selects.
    pub fn matches(&self, req: &HeaderMap, extra: &str) -> bool {
        *self.extra == *extra
            && self
                .vary
                .iter()
                .all(|(name, v)| crate::key::field_value(req, name) == *v)
    }

    /// Until when it is kept (seconds since the epoch): while it may be
    /// served fresh or stale, and for a while longer when it has a
    /// validator, so that a conditional request can renew it cheaply.
    pub fn retain_until(&self) -> u64 {
        let keep = if self.etag.is_some() || self.last_modified.is_some() {
            KEEP
        } else {
            0
        };
        self.fresh.useless_after().saturating_add(keep)
    }

    /// Bytes it holds, as the store's bound counts them.
    pub fn weight(&self) -> u64 {
        let head: usize = self
            .headers
            .iter()
            .map(|(k, v)| k.as_str().len() + v.len() + 32)
            .sum();
        let body = match &self.body {
            ObjBody::Complete(b) => b.len(),
            ObjBody::Filling(_) | ObjBody::OnDisk(_) => 0,
        };
        (256 + head + body + self.extra.len()) as u64
    }

    /// The body's length when known.
    pub fn body_len(&self) -> Option<u64> {
        match &self.body {
            ObjBody::Complete(b) => Some(b.len() as u64),
            ObjBody::OnDisk(d) => Some(d.len),
            ObjBody::Filling(_) => self
                .headers
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|s| s.parse().ok()),
        }
    }

    /// The same response with another body or head: for a body that has
    /// arrived whole, and for fields a 304 freshened.
    pub fn with(&self, headers: HeaderMap, fresh: Freshness, body: ObjBody) -> Object {
        Object {
            status: self.status,
            etag: headers.get(http::header::ETAG).cloned(),
            last_modified: crate::rules::last_modified(&headers),
            headers,
            fresh,
            vary: self.vary.clone(),
            extra: self.extra.clone(),
            tags: self.tags.clone(),
            body,
            file: None,
        }
    }

    pub fn share_body(&self) -> ObjBody {
        match &self.body {
            ObjBody::Complete(b) => ObjBody::Complete(b.clone()),
            ObjBody::Filling(f) => ObjBody::Filling(f.clone()),
            ObjBody::OnDisk(d) => ObjBody::OnDisk(d.clone()),
        }
    }
}

/// How long a response with a validator is kept past its last use, for
/// revalidation (Varnish's `keep`); the byte bound evicts it sooner.
const KEEP: u64 = 3600;

/// Variants kept per URL; a request selecting another replaces the oldest.
const MAX_VARIANTS: usize = 32;

/// A URL's stored responses, one per variant.
pub struct Entry {
    pub variants: Vec<Arc<Object>>,
}

impl Entry {
    /// `old`'s variants with `obj` in place of the one it stands for (the
    /// oldest goes when there are too many).
    pub(crate) fn adding(old: Option<&Entry>, obj: Arc<Object>) -> Entry {
        let mut variants: Vec<Arc<Object>> = old.map_or_else(Vec::new, |e| {
            e.variants
                .iter()
                .filter(|o| !(o.vary == obj.vary && o.extra == obj.extra))
                .cloned()
                .collect()
        });
        if variants.len() >= MAX_VARIANTS {
            variants.remove(0);
        }
        variants.push(obj);
        Entry { variants }
    }

    pub(crate) fn weight(&self, key: &str) -> u32 {
        let w: u64 = key.len() as u64 + self.variants.iter().map(|v| v.weight()).sum::<u64>();
        w.min(u32::MAX as u64) as u32
    }

    fn useless_after(&self) -> u64 {
        self.variants
            .iter()
            .map(|v| v.retain_until())
            .max()
            .unwrap_or(0)
    }
}

/// Entries leave the store once no variant is of use.
pub(crate) struct Expire;

impl moka::Expiry<Arc<str>, Arc<Entry>> for Expire {
    fn expire_after_create(&self, _: &Arc<str>, v: &Arc<Entry>, _: Instant) -> Option<Duration> {
        Some(Duration::from_secs(
            v.useless_after().saturating_sub(crate::now()).max(1),
        ))
    }

    fn expire_after_update(
        &self,
        k: &Arc<str>,
        v: &Arc<Entry>,
        at: Instant,
        _: Option<Duration>,
    ) -> Option<Duration> {
        self.expire_after_create(k, v, at)
    }
}

/// Past this many buffered bytes ahead of the slowest reader, a body that
/// is no longer kept waits for its readers.
const WINDOW: u64 = 1024 * 1024;

/// A body arriving from upstream, read by any number of clients.
#[derive(Default)]
pub struct Fill {
    state: Mutex<FillState>,
}

#[derive(Default)]
struct FillState {
    chunks: VecDeque<Bytes>,
    /// Index of `chunks[0]` among all chunks received.
    base: usize,
    received: u64,
    /// `Some(true)`: complete; `Some(false)`: the upstream failed.
    end: Option<bool>,
    wakers: Vec<Waker>,
    /// Each reader's next chunk index (`None`: a free slot).
    readers: Vec<Option<usize>>,
    /// Not kept for the store any more: chunks every reader has read go.
    dropping: bool,
    pump: Option<Waker>,
}

impl FillState {
    fn wake_readers(&mut self) {
        for w in self.wakers.drain(..) {
            w.wake();
        }
    }

    fn trim(&mut self) {
        if !self.dropping {
            return;
        }
        let min = self
            .readers
            .iter()
            .flatten()
            .copied()
            .min()
            .unwrap_or(self.base + self.chunks.len());
        while self.base < min && !self.chunks.is_empty() {
            self.chunks.pop_front();
            self.base += 1;
        }
        if let Some(w) = self.pump.take() {
            w.wake();
        }
    }

    fn buffered(&self) -> u64 {
        self.chunks.iter().map(|c| c.len() as u64).sum()
    }
}

impl Fill {
    fn lock(&self) -> std::sync::MutexGuard<'_, FillState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn push(&self, b: Bytes) {
        let mut s = self.lock();
        s.received += b.len() as u64;
        s.chunks.push_back(b);
        s.wake_readers();
    }

    pub fn finish(&self, ok: bool) {
        let mut s = self.lock();
        s.end = Some(ok);
        s.wake_readers();
    }

    pub fn received(&self) -> u64 {
        self.lock().received
    }

    /// Stop keeping the body for the store: from now on it only streams to
    /// the readers it has, and memory holds what the slowest has not read.
    pub fn stop_keeping(&self) {
        let mut s = self.lock();
        s.dropping = true;
        s.trim();
    }

    /// For the pump of a body no longer kept: ready once the slowest reader
    /// is within the window; `false` once no reader is left.
    pub fn poll_room(&self, cx: &mut Context<'_>) -> Poll<bool> {
        let mut s = self.lock();
        if !s.dropping {
            return Poll::Ready(true);
        }
        if s.readers.iter().all(Option::is_none) {
            return Poll::Ready(false);
        }
        if s.buffered() <= WINDOW {
            return Poll::Ready(true);
        }
        s.pump = Some(cx.waker().clone());
        Poll::Pending
    }

    /// The whole body once it has arrived (and was kept), in one piece.
    pub fn whole(&self) -> Option<Bytes> {
        let s = self.lock();
        if s.end != Some(true) || s.dropping || s.base != 0 {
            return None;
        }
        Some(match s.chunks.len() {
            0 => Bytes::new(),
            1 => s.chunks[0].clone(),
            _ => {
                let mut v = Vec::with_capacity(s.received as usize);
                for c in &s.chunks {
                    v.extend_from_slice(c);
                }
                Bytes::from(v)
            }
        })
    }

    /// A new reader from the first byte, or `None` when the start is gone.
    pub fn reader(self: &Arc<Self>, len: Option<u64>) -> Option<FillReader> {
        let mut s = self.lock();
        if s.base != 0 {
            return None;
        }
        let slot = match s.readers.iter().position(Option::is_none) {
            Some(i) => {
                s.readers[i] = Some(0);
                i
            }
            None => {
                s.readers.push(Some(0));
                s.readers.len() - 1
            }
        };
        Some(FillReader {
            fill: self.clone(),
            slot,
            next: 0,
            len,
        })
    }
}

/// One client's view of a [`Fill`].
pub struct FillReader {
    fill: Arc<Fill>,
    slot: usize,
    next: usize,
    len: Option<u64>,
}

impl http_body::Body for FillReader {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        let mut s = this.fill.lock();
        if this.next < s.base + s.chunks.len() {
            let chunk = s.chunks[this.next - s.base].clone();
            this.next += 1;
            let slot = this.slot;
            s.readers[slot] = Some(this.next);
            s.trim();
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        match s.end {
            Some(true) => Poll::Ready(None),
            Some(false) => Poll::Ready(Some(Err("upstream response ended early".into()))),
            None => {
                s.wakers.push(cx.waker().clone());
                Poll::Pending
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self.len {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}

impl Drop for FillReader {
    fn drop(&mut self) {
        let mut s = self.fill.lock();
        if let Some(r) = s.readers.get_mut(self.slot) {
            *r = None;
        }
        s.trim();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn readers_get_the_body_as_it_arrives() {
        let fill = Arc::new(Fill::default());
        let mut a = fill.reader(None).unwrap();
        fill.push(Bytes::from_static(b"ab"));
        assert_eq!(a.frame().await.unwrap().unwrap().into_data().unwrap(), "ab");
        // A reader that joins late starts from the first byte.
        let b = fill.reader(None).unwrap();
        fill.push(Bytes::from_static(b"cd"));
        fill.finish(true);
        assert_eq!(a.collect().await.unwrap().to_bytes(), "cd");
        assert_eq!(b.collect().await.unwrap().to_bytes(), "abcd");
        assert_eq!(fill.whole().unwrap(), "abcd");
    }

    #[tokio::test]
    async fn a_failed_upstream_is_an_error_for_readers() {
        let fill = Arc::new(Fill::default());
        let r = fill.reader(None).unwrap();
        fill.push(Bytes::from_static(b"ab"));
        fill.finish(false);
        assert!(r.collect().await.is_err());
        assert!(fill.whole().is_none());
    }

    #[tokio::test]
    async fn a_body_no_longer_kept_holds_only_what_readers_have_not_read() {
        let fill = Arc::new(Fill::default());
        let mut r = fill.reader(None).unwrap();
        for _ in 0..4 {
            fill.push(Bytes::from(vec![0u8; 1000]));
        }
        fill.stop_keeping();
        assert_eq!(fill.lock().chunks.len(), 4);
        r.frame().await.unwrap().unwrap();
        r.frame().await.unwrap().unwrap();
        assert_eq!(fill.lock().chunks.len(), 2);
        // No new reader can start: the first bytes are gone.
        assert!(fill.reader(None).is_none());
        drop(r);
        assert_eq!(fill.lock().chunks.len(), 0);
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert_eq!(fill.poll_room(&mut cx), Poll::Ready(false));
    }
}
