//! Content codings, the one copy every handler and filter uses: the codings
//! weir speaks ([`Encoding`]), `Accept-Encoding` negotiation by qvalue
//! ([`accept_q`], [`negotiate`], and [`negotiate_streamed`] for answers
//! compressed as they stream), which media types are worth compressing
//! ([`type_listed`]), one-shot compression of a whole body
//! ([`compress_once`]) and streaming compression of any response body
//! ([`compress_body`]).
//!
//! Owns the quality levels: high for variants computed once and kept, fast
//! for streams; and each worker's few gzip compressors, reused from answer
//! to answer. Must never compress a whole body on the async threads in
//! one go (callers run [`compress_once`] under `spawn_blocking`), and a
//! stream must never hold back bytes its source has already given while
//! the source waits (server-sent events and long polls stay live).

use std::future::Future;
use std::pin::{Pin, pin};
use std::task::{Context, Poll, Waker};

use async_compression::Level;
use bytes::Bytes;
use flate2::{Compress, Crc, FlushCompress, Status};
use http::{HeaderMap, HeaderValue, header};
use http_body::{Frame, SizeHint};
use tokio::io::AsyncWriteExt;

use crate::body::{Body, BodyError};

/// Content codings weir produces and serves, for precompressed sidecars and
/// compression on the fly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    Br,
    Zstd,
    Gzip,
}

impl Encoding {
    /// The content-coding token.
    pub fn token(self) -> &'static str {
        match self {
            Encoding::Br => "br",
            Encoding::Zstd => "zstd",
            Encoding::Gzip => "gzip",
        }
    }

    /// Suffix of a precompressed sidecar file (`x.css.br`).
    pub fn extension(self) -> &'static str {
        match self {
            Encoding::Br => ".br",
            Encoding::Zstd => ".zst",
            Encoding::Gzip => ".gz",
        }
    }

    /// `Content-Encoding` header value (static, no allocation).
    pub fn header_value(self) -> HeaderValue {
        HeaderValue::from_static(self.token())
    }

    /// Dense index for per-encoding slots.
    pub fn index(self) -> usize {
        match self {
            Encoding::Br => 0,
            Encoding::Zstd => 1,
            Encoding::Gzip => 2,
        }
    }

    /// Every coding, in weir's order of preference.
    pub const ALL: [Encoding; 3] = [Encoding::Br, Encoding::Zstd, Encoding::Gzip];
}

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

/// The coding for an answer compressed as it streams: the acceptable one
/// with the highest qvalue, as [`negotiate`]; at equal qvalue brotli comes
/// after gzip whatever its place in `candidates`. At the levels a stream is
/// compressed at, brotli's output is no smaller than gzip's and costs
/// about twice the CPU; nginx and Caddy, which have no brotli encoder,
/// answer such a client with gzip too. A client that prefers brotli by
/// qvalue, or offers nothing else weir has, still gets it.
pub fn negotiate_streamed(
    headers: &HeaderMap,
    candidates: impl Iterator<Item = Encoding>,
) -> Option<Encoding> {
    let mut order: Vec<Encoding> = candidates.collect();
    if let (Some(br), Some(gz)) = (
        order.iter().position(|&e| e == Encoding::Br),
        order.iter().position(|&e| e == Encoding::Gzip),
    ) && br < gz
    {
        let br = order.remove(br);
        order.insert(gz, br);
    }
    negotiate(headers, order.into_iter())
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

/// True when the media type `essence` (`type/subtype`, no parameters)
/// matches one of `types`: exactly (case-insensitive) or by a `type/*`
/// pattern.
pub fn type_listed(essence: &str, types: &[String]) -> bool {
    types.iter().any(|t| {
        if let Some(prefix) = t.strip_suffix("/*") {
            essence
                .split_once('/')
                .is_some_and(|(ty, _)| ty.eq_ignore_ascii_case(prefix))
        } else {
            t.eq_ignore_ascii_case(essence)
        }
    })
}

/// Drives a future that never waits on I/O (in-memory encoders) to
/// completion on the current thread.
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
    let mut e = Encoder::new(
        enc,
        fast,
        Vec::with_capacity(data.len() / 3 + 64),
        Some(data.len() as u64),
    );
    e.write(data)?;
    e.finish()
}

/// One coding's encoder writing into a `Vec`, driven synchronously (the
/// `Vec` never makes it wait).
enum Encoder {
    // Boxed: brotli's state is several KiB, the others' a pointer or two.
    Br(Box<async_compression::tokio::write::BrotliEncoder<Vec<u8>>>),
    Zstd(async_compression::tokio::write::ZstdEncoder<Vec<u8>>),
    Gzip(Gzip),
}

impl Encoder {
    /// `len`: the body's length when known, which sizes brotli's window.
    fn new(enc: Encoding, fast: bool, out: Vec<u8>, len: Option<u64>) -> Self {
        use async_compression::tokio::write::{BrotliEncoder, ZstdEncoder};
        // Streams run on the async threads chunk by chunk: their levels
        // stay cheap. gzip 2 is zlib-rs's greedy deflate, the algorithm of
        // zlib's level 1 (nginx's default); its level 1 is a quicker mode
        // with fixed Huffman codes whose output is much bigger. Kept
        // variants are made once and served many times.
        let (br, zstd, gz) = if fast {
            (Level::Precise(4), Level::Precise(3), 2)
        } else {
            (Level::Precise(9), Level::Precise(12), 9)
        };
        match enc {
            Encoding::Br => {
                let mut params = async_compression::brotli::EncoderParams::default().quality(br);
                if let Some(n) = len {
                    // A window no larger than the body: brotli sets up (and
                    // clears) its buffers for the window, which for a small
                    // answer would cost more than compressing it.
                    params = params.window_size(brotli_window(n));
                }
                Encoder::Br(Box::new(BrotliEncoder::with_params(out, params)))
            }
            Encoding::Zstd => Encoder::Zstd(match len {
                // As brotli's: tables for the body, not for a 2 MiB window.
                Some(n) => ZstdEncoder::with_quality_and_params(out, zstd, &zstd_window(n)),
                None => ZstdEncoder::with_quality(out, zstd),
            }),
            Encoding::Gzip => Encoder::Gzip(Gzip::new(gz, out)),
        }
    }

    fn write(&mut self, data: &[u8]) -> std::io::Result<()> {
        match self {
            Encoder::Br(e) => run_ready(e.write_all(data)),
            Encoder::Zstd(e) => run_ready(e.write_all(data)),
            Encoder::Gzip(g) => g.write(data),
        }
    }

    /// Ends the current block so everything written so far can be decoded.
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Encoder::Br(e) => run_ready(e.flush()),
            Encoder::Zstd(e) => run_ready(e.flush()),
            Encoder::Gzip(g) => g.deflate(&[], FlushCompress::Sync),
        }
    }

    /// The output produced so far, taken out.
    fn take(&mut self) -> Vec<u8> {
        std::mem::take(match self {
            Encoder::Br(e) => e.get_mut(),
            Encoder::Zstd(e) => e.get_mut(),
            Encoder::Gzip(g) => &mut g.out,
        })
    }

    /// Ends the stream; the output not yet taken.
    fn finish(self) -> std::io::Result<Vec<u8>> {
        match self {
            Encoder::Br(mut e) => {
                run_ready(e.shutdown())?;
                Ok(e.into_inner())
            }
            Encoder::Zstd(mut e) => {
                run_ready(e.shutdown())?;
                Ok(e.into_inner())
            }
            Encoder::Gzip(g) => g.finish(),
        }
    }
}

/// A gzip member (RFC 1952) around a raw deflate stream from
/// [`DEFLATERS`]: header, deflate data, CRC-32 and length.
struct Gzip {
    level: u32,
    /// `None` only once given back to the pool.
    deflater: Option<Compress>,
    crc: Crc,
    out: Vec<u8>,
}

/// A gzip header without a name, time or extra fields, as flate2 writes it.
const GZIP_HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255];

/// Deflate compressors this thread has finished with, by level, reset and
/// ready. A compressor's tables are a few hundred KiB; allocating them for
/// every answer costs more than compressing a small answer (fresh pages
/// each time), so each worker keeps a few.
const POOLED_DEFLATERS: usize = 4;

thread_local! {
    static DEFLATERS: std::cell::RefCell<Vec<(u32, Compress)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

impl Gzip {
    fn new(level: u32, mut out: Vec<u8>) -> Gzip {
        let pooled = DEFLATERS.with_borrow_mut(|pool| {
            let at = pool.iter().position(|(l, _)| *l == level)?;
            Some(pool.swap_remove(at).1)
        });
        let deflater =
            pooled.unwrap_or_else(|| Compress::new(flate2::Compression::new(level), false));
        out.extend_from_slice(&GZIP_HEADER);
        Gzip {
            level,
            deflater: Some(deflater),
            crc: Crc::new(),
            out,
        }
    }

    fn write(&mut self, data: &[u8]) -> std::io::Result<()> {
        self.crc.update(data);
        self.deflate(data, FlushCompress::None)
    }

    /// Feeds `input` with `flush`, growing `out` until the compressor has
    /// taken all of it and has nothing more to give for that flush.
    fn deflate(&mut self, mut input: &[u8], flush: FlushCompress) -> std::io::Result<()> {
        let d = self
            .deflater
            .as_mut()
            .ok_or_else(|| std::io::Error::other("gzip stream already finished"))?;
        let finishing = matches!(flush, FlushCompress::Finish);
        loop {
            if self.out.capacity() - self.out.len() < 1024 {
                self.out.reserve(1024.max(input.len() / 2));
            }
            let (before_in, before_out) = (d.total_in(), d.total_out());
            let status = d
                .compress_vec(input, &mut self.out, flush)
                .map_err(std::io::Error::other)?;
            input = &input[(d.total_in() - before_in) as usize..];
            let room_left = self.out.len() < self.out.capacity();
            let stuck = d.total_in() == before_in && d.total_out() == before_out;
            match status {
                Status::StreamEnd => return Ok(()),
                // No progress with room to write: a flush with nothing
                // left to flush is done; anything else would spin.
                _ if stuck && room_left => {
                    return if input.is_empty() && !finishing {
                        Ok(())
                    } else {
                        Err(std::io::Error::other(
                            "gzip: the compressor made no progress",
                        ))
                    };
                }
                _ if input.is_empty() && room_left && !finishing => return Ok(()),
                _ => {}
            }
        }
    }

    /// Ends the member; the output not yet taken.
    fn finish(mut self) -> std::io::Result<Vec<u8>> {
        self.deflate(&[], FlushCompress::Finish)?;
        let mut out = std::mem::take(&mut self.out);
        out.extend_from_slice(&self.crc.sum().to_le_bytes());
        out.extend_from_slice(&self.crc.amount().to_le_bytes());
        Ok(out)
    }
}

impl Drop for Gzip {
    /// Gives the compressor back, reset, whether the stream ended or was
    /// abandoned (the client went away).
    fn drop(&mut self) {
        if let Some(mut d) = self.deflater.take() {
            d.reset();
            let level = self.level;
            DEFLATERS.with_borrow_mut(|pool| {
                if pool.len() < POOLED_DEFLATERS {
                    pool.push((level, d));
                }
            });
        }
    }
}

/// Input fed to the encoder in one step: bounds the CPU time one poll
/// spends on the async thread.
const STEP: usize = 64 * 1024;

/// `body` compressed with `enc` at the streaming levels, as it streams.
/// Whatever the source has given goes out (flushed) as soon as the source
/// has nothing more ready, so a slow or event-driven body is never held
/// back; a source that gives faster than that is compressed in longer runs.
/// `len`: the identity's length, when the answer said it.
pub fn compress_body(body: Body, enc: Encoding, len: Option<u64>) -> Body {
    Body::stream(Compressed {
        inner: body,
        encoder: Some(Encoder::new(enc, true, Vec::new(), len)),
        input: Bytes::new(),
        unflushed: false,
        trailers: None,
    })
}

/// brotli's `lgwin` for a body of `len` bytes: the smallest window that
/// holds it (brotli's window is `2^lgwin - 16`), from brotli's least (10)
/// to its default (22).
fn brotli_window(len: u64) -> i32 {
    let need = len.saturating_add(16);
    let bits = 64 - need.saturating_sub(1).leading_zeros();
    bits.clamp(10, 22) as i32
}

/// zstd's window for a body of `len` bytes, and its match tables no larger
/// than that window needs, as zstd sizes them itself when told the length
/// up front (its window from 2^10, its least, to 2^21, level 3's; the hash
/// table one bit above the window, the chain table at it, within level
/// 3's 17 and 16 bits).
fn zstd_window(len: u64) -> [async_compression::zstd::CParameter; 3] {
    use async_compression::zstd::CParameter;
    let bits = (64 - len.saturating_sub(1).leading_zeros()).clamp(10, 21);
    [
        CParameter::window_log(bits),
        CParameter::hash_log((bits + 1).min(17)),
        CParameter::chain_log(bits.min(16)),
    ]
}

/// The body [`compress_body`] makes.
struct Compressed {
    inner: Body,
    /// `None` once the stream is finished.
    encoder: Option<Encoder>,
    /// Data taken from `inner` not yet fed to the encoder.
    input: Bytes,
    /// Data was fed since the last flush.
    unflushed: bool,
    /// The source's trailers, sent after the last compressed bytes.
    trailers: Option<HeaderMap>,
}

impl Compressed {
    fn out(bytes: Vec<u8>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(bytes)))))
    }
}

impl http_body::Body for Compressed {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        let Some(encoder) = this.encoder.as_mut() else {
            return Poll::Ready(this.trailers.take().map(|t| Ok(Frame::trailers(t))));
        };
        loop {
            if !this.input.is_empty() {
                let step = this.input.split_to(this.input.len().min(STEP));
                encoder.write(&step)?;
                this.unflushed = true;
                let out = encoder.take();
                if !out.is_empty() {
                    return Self::out(out);
                }
                if !this.input.is_empty() {
                    // A long chunk that made no output yet: let the
                    // thread's other tasks run before the next step.
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                continue;
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => this.input = data,
                    Err(frame) => {
                        if let Ok(t) = frame.into_trailers() {
                            this.trailers = Some(t);
                        }
                    }
                },
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => {
                    let out = this
                        .encoder
                        .take()
                        .map_or(Ok(Vec::new()), Encoder::finish)?;
                    if out.is_empty() {
                        return Poll::Ready(this.trailers.take().map(|t| Ok(Frame::trailers(t))));
                    }
                    return Self::out(out);
                }
                Poll::Pending => {
                    // The source waits: send what it gave so far.
                    if std::mem::take(&mut this.unflushed) {
                        encoder.flush()?;
                        let out = encoder.take();
                        if !out.is_empty() {
                            return Self::out(out);
                        }
                    }
                    return Poll::Pending;
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.encoder.is_none() && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zstd_stream_of_known_length_roundtrips_in_a_window_sized_to_it() {
        for n in [0usize, 1, 1000, 20 * 1024, 300_000] {
            let data: Vec<u8> = (0..n).map(|i| b"weir zstd "[i % 10]).collect();
            let mut e = Encoder::new(Encoding::Zstd, true, Vec::new(), Some(n as u64));
            e.write(&data).unwrap();
            let c = e.finish().unwrap();
            assert_eq!(decode(Encoding::Zstd, &c), data, "{n}");
            // The frame header's window descriptor (RFC 8878 §3.1.1.1.2):
            // its exponent is the window's log above 10.
            let want = match n {
                0..=1024 => 10,
                20480 => 15,
                _ => 19,
            };
            if n > 0 {
                assert_eq!(c[4] & 0x20, 0, "{n}: not a single segment");
                assert_eq!(10 + (c[5] >> 3), want, "{n}");
            }
        }
    }

    #[test]
    fn brotli_windows_hold_the_body_and_stay_within_brotlis_range() {
        assert_eq!(brotli_window(0), 10);
        assert_eq!(brotli_window(1000), 10);
        assert_eq!(brotli_window(1009), 11);
        assert_eq!(brotli_window(20 * 1024), 15);
        assert_eq!(brotli_window(u64::MAX), 22);
        for n in [1u64, 1008, 1009, 5000, 65_520, 65_521, 4_000_000] {
            let w = brotli_window(n);
            assert!(w == 22 || (1u64 << w) - 16 >= n, "{n} in a window of {w}");
        }
    }
    use http_body_util::BodyExt;
    use tokio::io::AsyncReadExt;

    fn h(v: &str) -> HeaderMap {
        let mut m = HeaderMap::new();
        m.insert(header::ACCEPT_ENCODING, HeaderValue::from_str(v).unwrap());
        m
    }

    pub(crate) fn decode(enc: Encoding, c: &[u8]) -> Vec<u8> {
        use async_compression::tokio::bufread::{BrotliDecoder, GzipDecoder, ZstdDecoder};
        run_ready(async {
            let mut out = Vec::new();
            match enc {
                Encoding::Br => BrotliDecoder::new(c).read_to_end(&mut out).await,
                Encoding::Zstd => ZstdDecoder::new(c).read_to_end(&mut out).await,
                Encoding::Gzip => GzipDecoder::new(c).read_to_end(&mut out).await,
            }
            .unwrap();
            out
        })
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
        assert_eq!(negotiate(&h("br, gzip"), all()), Some(Encoding::Br));
        assert_eq!(negotiate(&h("gzip, br;q=0.9"), all()), Some(Encoding::Gzip));
        assert_eq!(negotiate(&h("br;q=0, gzip;q=0"), all()), None);
        assert_eq!(negotiate(&h("deflate"), all()), None);
        assert_eq!(negotiate(&HeaderMap::new(), all()), None);
    }

    #[test]
    fn a_stream_takes_gzip_over_brotli_at_equal_qvalue_only() {
        let all = || Encoding::ALL.into_iter();
        let s = |ae| negotiate_streamed(&h(ae), all());
        assert_eq!(s("br, gzip"), Some(Encoding::Gzip));
        assert_eq!(s("gzip, br"), Some(Encoding::Gzip));
        assert_eq!(s("br, gzip, zstd"), Some(Encoding::Zstd));
        assert_eq!(s("br, gzip;q=0.9"), Some(Encoding::Br));
        assert_eq!(s("br"), Some(Encoding::Br));
        assert_eq!(s("br, deflate"), Some(Encoding::Br));
        assert_eq!(s("identity"), None);
        // The candidates still bound what is offered.
        let br_only = [Encoding::Br];
        assert_eq!(
            negotiate_streamed(&h("br, gzip"), br_only.into_iter()),
            Some(Encoding::Br)
        );
        let gzip_first = [Encoding::Gzip, Encoding::Br];
        assert_eq!(
            negotiate_streamed(&h("br, gzip"), gzip_first.into_iter()),
            Some(Encoding::Gzip)
        );
    }

    /// Deflate compressors go back to the thread's pool when a stream ends
    /// or is dropped unfinished, and a reused one starts a fresh stream.
    #[test]
    fn a_pooled_deflater_makes_a_fresh_stream_each_time() {
        let data = b"{\"id\":1,\"name\":\"weir\"},".repeat(400);
        std::thread::spawn(move || {
            let pooled = || DEFLATERS.with_borrow(|p| p.len());
            assert_eq!(pooled(), 0);
            let mut abandoned = Encoder::new(Encoding::Gzip, true, Vec::new(), None);
            abandoned.write(&data[..3000]).unwrap();
            drop(abandoned);
            assert_eq!(pooled(), 1);
            for _ in 0..3 {
                let c = compress_once(&data, Encoding::Gzip, true).unwrap();
                assert_eq!(decode(Encoding::Gzip, &c), data);
                assert_eq!(pooled(), 1);
            }
            // Many at once: the pool keeps only a few.
            let many: Vec<Encoder> = (0..POOLED_DEFLATERS + 3)
                .map(|_| Encoder::new(Encoding::Gzip, true, Vec::new(), None))
                .collect();
            assert_eq!(pooled(), 0);
            drop(many);
            assert_eq!(pooled(), POOLED_DEFLATERS);
            // The kept level is a pool of its own.
            let c = compress_once(&data, Encoding::Gzip, false).unwrap();
            assert_eq!(decode(Encoding::Gzip, &c), data);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn types_match_prefix_and_exact() {
        let t: Vec<String> = ["text/*", "application/json"].map(String::from).into();
        assert!(type_listed("text/html", &t));
        assert!(type_listed("TEXT/x-anything", &t));
        assert!(type_listed("application/JSON", &t));
        assert!(!type_listed("image/png", &t));
        assert!(!type_listed("application/json-seq", &t));
    }

    #[test]
    fn compress_once_roundtrips() {
        let data = b"hello hello hello hello hello world".repeat(100);
        for (enc, fast) in Encoding::ALL
            .into_iter()
            .flat_map(|e| [(e, false), (e, true)])
        {
            let c = compress_once(&data, enc, fast).unwrap();
            assert!(c.len() < data.len());
            assert_eq!(decode(enc, &c), data);
        }
    }

    fn chunks(parts: Vec<Bytes>) -> Body {
        let s = futures_util::stream::iter(parts.into_iter().map(Ok::<_, std::io::Error>));
        Body::stream(http_body_util::StreamBody::new(
            futures_util::TryStreamExt::map_ok(s, Frame::data),
        ))
    }

    #[tokio::test]
    async fn a_streamed_body_roundtrips_in_every_coding() {
        // Longer than one step, in uneven chunks.
        let data: Vec<u8> = (0..300_000u32)
            .flat_map(|i| format!("{{\"n\":{i}}},").into_bytes())
            .take(300_000)
            .collect();
        let parts: Vec<Bytes> = data.chunks(70_001).map(Bytes::copy_from_slice).collect();
        for enc in Encoding::ALL {
            let out = compress_body(chunks(parts.clone()), enc, None)
                .collect()
                .await
                .unwrap()
                .to_bytes();
            assert!(out.len() < data.len() / 4, "{enc:?}: {}", out.len());
            assert_eq!(decode(enc, &out), data, "{enc:?}");
        }
        // One big frame too.
        let out = compress_body(Body::full(data.clone()), Encoding::Gzip, None)
            .collect()
            .await
            .unwrap()
            .to_bytes();
        assert_eq!(decode(Encoding::Gzip, &out), data);
    }

    /// A source that has given an event and then waits: the event's bytes
    /// go out, decodable, before the source ends (server-sent events).
    #[tokio::test]
    async fn what_the_source_gave_goes_out_while_it_waits() {
        for enc in Encoding::ALL {
            let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(4);
            let s = futures_util::stream::unfold(rx, |mut rx| async move {
                rx.recv()
                    .await
                    .map(|b| (Ok::<_, std::io::Error>(Frame::data(b)), rx))
            });
            let mut body =
                compress_body(Body::stream(http_body_util::StreamBody::new(s)), enc, None);
            tx.send(Bytes::from_static(b"data: one\n\n")).await.unwrap();
            let mut got = Vec::new();
            // The source stays open: everything decodable must come now.
            while let Ok(Some(frame)) =
                tokio::time::timeout(std::time::Duration::from_millis(200), body.frame()).await
            {
                got.extend_from_slice(&frame.unwrap().into_data().unwrap());
                if stream_prefix_decodes(enc, &got).starts_with(b"data: one\n\n") {
                    break;
                }
            }
            assert_eq!(
                stream_prefix_decodes(enc, &got),
                b"data: one\n\n",
                "{enc:?}"
            );
            drop(tx);
            while let Some(f) = body.frame().await {
                got.extend_from_slice(&f.unwrap().into_data().unwrap());
            }
            assert_eq!(decode(enc, &got), b"data: one\n\n", "{enc:?}");
        }
    }

    /// What an unfinished stream decodes to so far.
    fn stream_prefix_decodes(enc: Encoding, c: &[u8]) -> Vec<u8> {
        use async_compression::tokio::bufread::{BrotliDecoder, GzipDecoder, ZstdDecoder};
        run_ready(async {
            let mut out = Vec::new();
            let mut buf = [0u8; 4096];
            macro_rules! drain {
                ($d:expr) => {{
                    let mut d = $d;
                    loop {
                        match d.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => out.extend_from_slice(&buf[..n]),
                        }
                    }
                }};
            }
            match enc {
                Encoding::Br => drain!(BrotliDecoder::new(c)),
                Encoding::Zstd => drain!(ZstdDecoder::new(c)),
                Encoding::Gzip => drain!(GzipDecoder::new(c)),
            }
            out
        })
    }

    #[tokio::test]
    async fn trailers_follow_the_compressed_bytes() {
        let mut t = HeaderMap::new();
        t.insert("x-checksum", HeaderValue::from_static("abc"));
        let frames = vec![
            Ok::<_, std::io::Error>(Frame::data(Bytes::from_static(b"hello hello hello"))),
            Ok(Frame::trailers(t)),
        ];
        let body = Body::stream(http_body_util::StreamBody::new(futures_util::stream::iter(
            frames,
        )));
        let collected = compress_body(body, Encoding::Gzip, None)
            .collect()
            .await
            .unwrap();
        assert_eq!(collected.trailers().unwrap()["x-checksum"], "abc");
        assert_eq!(
            decode(Encoding::Gzip, &collected.to_bytes()),
            b"hello hello hello"
        );
    }
}
