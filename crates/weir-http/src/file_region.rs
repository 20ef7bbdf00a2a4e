//! A response body that is a cached file's bytes, tagged with the file they
//! came from, so a plain-TCP connection can send it with `sendfile`
//! (`weir_server::server::zero_copy`). Owns only the tag; never does I/O.

use std::fs::File;
use std::sync::Arc;

use bytes::Bytes;

/// Bodies at least this large go out with `sendfile`; below it one `writev`
/// of head and body costs less than two system calls.
pub const MIN_LEN: usize = 64 * 1024;

/// A response body that is the bytes of `file` from `offset`: a response
/// extension set by the static-file handler, taken by the connection.
#[derive(Clone)]
pub struct FileRegion {
    pub bytes: Bytes,
    pub file: Arc<File>,
    pub offset: u64,
}

impl FileRegion {
    /// Where `s` lies in this region, if it lies wholly inside it.
    pub fn locate(&self, s: &[u8]) -> Option<u64> {
        let start = self.bytes.as_ptr() as usize;
        let p = s.as_ptr() as usize;
        (p >= start && p + s.len() <= start + self.bytes.len()).then(|| (p - start) as u64)
    }

    pub fn end(&self) -> usize {
        self.bytes.as_ptr() as usize + self.bytes.len()
    }
}
