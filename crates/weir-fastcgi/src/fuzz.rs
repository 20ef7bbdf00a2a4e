//! Randomised tests of the decoder and the head parser against valid,
//! damaged and random input, seeded so that a failure reproduces. They run
//! with every `cargo test`; none may be skipped or made slow (they must stay
//! within a few seconds in debug builds).

use bytes::BytesMut;
use fastrand::Rng;

use crate::head::{HeadError, parse_head};
use crate::proto::tests::{app_end, app_record};
use crate::proto::{Decoder, Event, HEADER_LEN, MAX_CONTENT, ProtoError, RecordType};

const ITERATIONS: usize = 200_000;
/// The most the decoder may leave in `buf` when it asks for more: one whole
/// record with the largest content and padding.
const MAX_BUFFERED: usize = HEADER_LEN + MAX_CONTENT + 255;

/// What a stream decoded to.
#[derive(Default)]
struct Decoded {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    ended: bool,
}

/// A valid record stream for request `id` and the STDOUT and STDERR bytes it
/// carries.
fn valid_stream(rng: &mut Rng, id: u16) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let mut input = Vec::new();
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    let padding = |rng: &mut Rng| match rng.u8(0..16) {
        0 => 255,
        n => n % 9,
    };
    if rng.bool() {
        let head = random_head(rng);
        app_record(
            &mut input,
            RecordType::Stdout as u8,
            id,
            &head,
            padding(rng),
        );
        stdout.extend_from_slice(&head);
    }
    for _ in 0..rng.usize(0..6) {
        // Rarely, content big enough to need several records.
        let len = if rng.u16(..) == 0 {
            rng.usize(MAX_CONTENT - 8..MAX_CONTENT * 2)
        } else {
            rng.usize(0..48)
        };
        let content: Vec<u8> = std::iter::repeat_with(|| rng.u8(..)).take(len).collect();
        let (ty, sink) = match rng.u8(0..8) {
            0..=4 => (RecordType::Stdout, &mut stdout),
            5 | 6 => (RecordType::Stderr, &mut stderr),
            _ => {
                let ty = if rng.bool() {
                    RecordType::GetValuesResult
                } else {
                    RecordType::UnknownType
                };
                let chunk = &content[..content.len().min(MAX_CONTENT)];
                app_record(&mut input, ty as u8, 0, chunk, padding(rng));
                continue;
            }
        };
        for chunk in content.chunks(MAX_CONTENT) {
            app_record(&mut input, ty as u8, id, chunk, padding(rng));
        }
        sink.extend_from_slice(&content);
    }
    app_record(&mut input, RecordType::Stdout as u8, id, &[], padding(rng));
    app_end(&mut input, id, rng.u32(..), 0, padding(rng));
    (input, stdout, stderr)
}

/// Lines that look like a CGI head, often enough valid, often broken.
fn random_head(rng: &mut Rng) -> Vec<u8> {
    const PIECES: &[&[u8]] = &[
        b"Status",
        b"Location",
        b"Set-Cookie",
        b"Content-Type",
        b"X-A",
        b":",
        b": ",
        b" ",
        b"\t",
        b"\r\n",
        b"\n",
        b"\r",
        b"404 Not Found",
        b"200",
        b"1000",
        b"/moved",
        b"a=b; Path=/",
        b"\0",
        b"\x7f",
        b"caf\xc3\xa9",
        b"(",
    ];
    let mut head = Vec::new();
    for _ in 0..rng.usize(0..12) {
        head.extend_from_slice(PIECES[rng.usize(..PIECES.len())]);
    }
    if rng.bool() {
        head.extend_from_slice(b"\r\n\r\n");
    }
    head
}

fn mutate(rng: &mut Rng, bytes: &mut Vec<u8>) {
    for _ in 0..rng.usize(1..4) {
        if bytes.is_empty() {
            bytes.push(rng.u8(..));
            continue;
        }
        let at = rng.usize(..bytes.len());
        match rng.u8(0..6) {
            0 => bytes[at] ^= 1 << rng.u8(0..8),
            1 => bytes.truncate(at),
            2 => {
                let end = rng.usize(at..=bytes.len().min(at + 64));
                let slice = bytes[at..end].to_vec();
                let to = rng.usize(..=bytes.len());
                bytes.splice(to..to, slice);
            }
            3 => {
                let end = rng.usize(at..=bytes.len().min(at + 16));
                bytes.drain(at..end);
            }
            // Values that steer the decoder: versions, types, small lengths.
            4 => bytes[at] = [0, 1, 2, 3, 6, 7, 10, 11, 0xff][rng.usize(..9)],
            _ => bytes[at] = rng.u8(..),
        }
    }
}

/// Feeds `input` to a decoder in chunks of random size up to `max_chunk`,
/// checking the decoder's bounds on every call.
fn feed(rng: &mut Rng, id: u16, input: &[u8], max_chunk: usize) -> Result<Decoded, ProtoError> {
    let mut decoder = Decoder::new(id);
    let mut buf = BytesMut::new();
    let mut decoded = Decoded::default();
    let mut rest = input;
    let mut calls = 0;
    loop {
        calls += 1;
        assert!(calls <= 2 * input.len() + 2, "decoder does not progress");
        match decoder.decode(&mut buf)? {
            Some(Event::Stdout(b)) => {
                assert!(!b.is_empty() && b.len() <= MAX_CONTENT);
                decoded.stdout.extend_from_slice(&b);
            }
            Some(Event::Stderr(b)) => {
                assert!(!b.is_empty() && b.len() <= MAX_CONTENT);
                decoded.stderr.extend_from_slice(&b);
            }
            Some(Event::End {
                protocol_status, ..
            }) => {
                assert_eq!(protocol_status, 0);
                assert!(decoder.ended());
                assert!(matches!(
                    decoder.decode(&mut buf),
                    Err(ProtoError::AfterEnd)
                ));
                decoded.ended = true;
                return Ok(decoded);
            }
            None => {
                assert!(
                    buf.len() < MAX_BUFFERED,
                    "decoder holds {} bytes",
                    buf.len()
                );
                if rest.is_empty() {
                    return Ok(decoded);
                }
                let n = rng.usize(1..=max_chunk).min(rest.len());
                buf.extend_from_slice(&rest[..n]);
                rest = &rest[n..];
            }
        }
    }
}

fn check_head(rng: &mut Rng, buf: &[u8]) {
    let max = rng.usize(0..96);
    match parse_head(buf, max) {
        Ok(Some((_, consumed))) => {
            assert!(consumed <= buf.len().min(max));
            assert_eq!(buf[consumed - 1], b'\n');
        }
        Ok(None) => assert!(buf.len() <= max),
        Err(HeadError::TooLarge(m)) => assert!(m == max && buf.len() > max),
        Err(HeadError::BadLine(_) | HeadError::BadStatus(_)) => {}
    }
}

#[test]
fn fuzz_decoder_never_panics_and_stays_bounded() {
    let mut rng = Rng::with_seed(0x00fc_9100_5eed);
    let mut ended_valid = 0;
    for _ in 0..ITERATIONS {
        let id = rng.u16(1..4);
        let max_chunk = [1, 3, 16, 64, 100_000][rng.usize(..5)];
        let (mut input, stdout, stderr) = valid_stream(&mut rng, id);
        match rng.u8(0..4) {
            0 => {
                let decoded = feed(&mut rng, id, &input, max_chunk).expect("valid stream");
                assert!(decoded.ended);
                assert_eq!(decoded.stdout, stdout);
                assert_eq!(decoded.stderr, stderr);
                ended_valid += 1;
            }
            1 => {
                let len = rng.usize(0..64);
                let random: Vec<u8> = std::iter::repeat_with(|| rng.u8(..)).take(len).collect();
                let _ = feed(&mut rng, id, &random, max_chunk);
            }
            _ => {
                mutate(&mut rng, &mut input);
                if let Ok(decoded) = feed(&mut rng, id, &input, max_chunk) {
                    assert!(decoded.stdout.len() + decoded.stderr.len() <= input.len());
                }
            }
        }
        let mut head = if rng.bool() {
            stdout
        } else {
            random_head(&mut rng)
        };
        if rng.bool() {
            mutate(&mut rng, &mut head);
        }
        check_head(&mut rng, &head);
    }
    assert!(ended_valid > ITERATIONS / 5);
}
