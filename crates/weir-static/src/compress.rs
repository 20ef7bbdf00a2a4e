//! Content codings: `Accept-Encoding` negotiation, one-shot compression of
//! cached bodies, and streaming compression of large files.
//!
//! Owns the quality levels (high for once-only cached variants, fast for
//! streams). Must never compress on the async threads in one go (callers run
//! [`compress_once`] under `spawn_blocking`) and never buffer a whole large
//! file: [`compressed_stream`] reads and emits bounded chunks.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use async_compression::Level;
use bytes::{Bytes, BytesMut};
use http::{HeaderMap, header};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};

use super::Encoding;

/// Parses a qvalue (`0`, `0.5`, `1.000`) into thousandths.
fn parse_q(s: &str) -> Option<u16> {
    let s = s.trim();
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut q: u16 = match int {
        "0" => 0,
        "1" => 1000,
        _ => return None,
    };
    let mut scale = 100;
    for b in frac.bytes() {
        q += u16::from(b - b'0') * scale;
        scale /= 10;
    }
    (q <= 1000).then_some(q)
}

/// The client's qvalue (0..=1000) for `enc`: an explicit entry wins over
/// `*`; unlisted codings are not acceptable. Absent header: nothing is.
pub fn accept_q(headers: &HeaderMap, enc: Encoding) -> u16 {
    let mut explicit: Option<u16> = None;
    let mut star: Option<u16> = None;
    for v in headers.get_all(header::ACCEPT_ENCODING) {
        let Ok(v) = v.to_str() else { continue };
        for item in v.split(',') {
            let mut parts = item.split(';');
            let coding = parts.next().unwrap_or("").trim();
            let mut q = 1000;
            for p in parts {
                if let Some((k, val)) = p.split_once('=')
                    && k.trim().eq_ignore_ascii_case("q")
                {
                    q = parse_q(val).unwrap_or(0);
                }
            }
            let matches = coding.eq_ignore_ascii_case(enc.token())
                || (enc == Encoding::Gzip && coding.eq_ignore_ascii_case("x-gzip"));
            if matches {
                explicit = Some(explicit.map_or(q, |e| e.max(q)));
            } else if coding == "*" {
                star = Some(q);
            }
        }
    }
    explicit.or(star).unwrap_or(0)
}

/// Picks the acceptable coding with the highest qvalue; ties go to the
/// earlier candidate (the server's preference order).
pub fn negotiate(
    headers: &HeaderMap,
    candidates: impl Iterator<Item = Encoding>,
) -> Option<Encoding> {
    if !headers.contains_key(header::ACCEPT_ENCODING) {
        return None;
    }
    let mut best: Option<(u16, Encoding)> = None;
    for enc in candidates {
        let q = accept_q(headers, enc);
        if q > 0 && best.is_none_or(|(bq, _)| q > bq) {
            best = Some((q, enc));
        }
    }
    best.map(|(_, e)| e)
}

/// Drives a future that never waits on I/O (in-memory encoders) to
/// completion on the current (blocking) thread.
fn run_ready<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(out) = f.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::yield_now();
    }
}

/// Compresses `data`: at a high level for variants computed once and
/// cached, at the streaming levels when `fast` (the result will not be kept,
/// so spending more CPU would buy nothing). Blocking: call from
/// `spawn_blocking`.
pub fn compress_once(data: &[u8], enc: Encoding, fast: bool) -> std::io::Result<Vec<u8>> {
    use async_compression::tokio::write::{BrotliEncoder, GzipEncoder, ZstdEncoder};
    let (br, zstd, gz) = if fast {
        (Level::Precise(4), Level::Precise(3), Level::Precise(6))
    } else {
        (Level::Precise(9), Level::Precise(12), Level::Best)
    };
    run_ready(async {
        let out = Vec::with_capacity(data.len() / 3 + 64);
        match enc {
            Encoding::Br => {
                let mut e = BrotliEncoder::with_quality(out, br);
                e.write_all(data).await?;
                e.shutdown().await?;
                Ok(e.into_inner())
            }
            Encoding::Zstd => {
                let mut e = ZstdEncoder::with_quality(out, zstd);
                e.write_all(data).await?;
                e.shutdown().await?;
                Ok(e.into_inner())
            }
            Encoding::Gzip => {
                let mut e = GzipEncoder::with_quality(out, gz);
                e.write_all(data).await?;
                e.shutdown().await?;
                Ok(e.into_inner())
            }
        }
    })
}

const STREAM_CHUNK: usize = 64 * 1024;

/// A fast streaming encoder over `reader` (already limited to the
/// snapshot length by the caller).
pub fn encoder<R>(reader: R, enc: Encoding) -> Box<dyn AsyncRead + Send + Unpin>
where
    R: AsyncRead + Send + Unpin + 'static,
{
    use async_compression::tokio::bufread::{BrotliEncoder, GzipEncoder, ZstdEncoder};
    let buf = BufReader::with_capacity(STREAM_CHUNK, reader);
    match enc {
        Encoding::Br => Box::new(BrotliEncoder::with_quality(buf, Level::Precise(4))),
        Encoding::Zstd => Box::new(ZstdEncoder::with_quality(buf, Level::Precise(3))),
        Encoding::Gzip => Box::new(GzipEncoder::with_quality(buf, Level::Precise(6))),
    }
}

/// Turns an `AsyncRead` into a stream of bounded `Bytes` chunks.
pub fn read_stream(
    reader: Box<dyn AsyncRead + Send + Unpin>,
) -> impl futures_util::Stream<Item = std::io::Result<Bytes>> + Send {
    futures_util::stream::try_unfold(reader, |mut r| async move {
        let mut buf = BytesMut::with_capacity(STREAM_CHUNK);
        let n = r.read_buf(&mut buf).await?;
        Ok((n > 0).then(|| (buf.freeze(), r)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn h(v: &str) -> HeaderMap {
        let mut m = HeaderMap::new();
        m.insert(header::ACCEPT_ENCODING, HeaderValue::from_str(v).unwrap());
        m
    }

    #[test]
    fn accept_encoding_qvalues() {
        assert_eq!(accept_q(&h("gzip, br"), Encoding::Br), 1000);
        assert_eq!(accept_q(&h("gzip;q=0.5, br;q=0"), Encoding::Br), 0);
        assert_eq!(accept_q(&h("gzip;q=0.5, br;q=0"), Encoding::Gzip), 500);
        assert_eq!(accept_q(&h("*;q=0.2"), Encoding::Zstd), 200);
        assert_eq!(accept_q(&h("*, zstd;q=0"), Encoding::Zstd), 0);
        assert_eq!(accept_q(&h("x-gzip"), Encoding::Gzip), 1000);
        assert_eq!(accept_q(&h("identity"), Encoding::Gzip), 0);
        assert_eq!(accept_q(&HeaderMap::new(), Encoding::Gzip), 0);
    }

    #[test]
    fn negotiation_prefers_q_then_server_order() {
        let all = || Encoding::ALL.into_iter();
        assert_eq!(negotiate(&h("gzip, br, zstd"), all()), Some(Encoding::Br));
        assert_eq!(negotiate(&h("gzip, br;q=0.9"), all()), Some(Encoding::Gzip));
        assert_eq!(negotiate(&h("br;q=0, gzip;q=0"), all()), None);
        assert_eq!(negotiate(&h("deflate"), all()), None);
        assert_eq!(negotiate(&HeaderMap::new(), all()), None);
    }

    #[test]
    fn compress_once_roundtrips() {
        use async_compression::tokio::bufread::{BrotliDecoder, GzipDecoder, ZstdDecoder};
        let data = b"hello hello hello hello hello world".repeat(100);
        for (enc, fast) in Encoding::ALL
            .into_iter()
            .flat_map(|e| [(e, false), (e, true)])
        {
            let c = compress_once(&data, enc, fast).unwrap();
            assert!(c.len() < data.len());
            let out = run_ready(async {
                let mut out = Vec::new();
                match enc {
                    Encoding::Br => BrotliDecoder::new(&c[..]).read_to_end(&mut out).await,
                    Encoding::Zstd => ZstdDecoder::new(&c[..]).read_to_end(&mut out).await,
                    Encoding::Gzip => GzipDecoder::new(&c[..]).read_to_end(&mut out).await,
                }
                .unwrap();
                out
            });
            assert_eq!(out, data);
        }
    }
}
