use super::*;
use http::Method;
use http::StatusCode;
use http::header::{self, HeaderValue};

#[test]
fn request_head_is_encoded_like_hypers() {
    let mut h = HeaderMap::new();
    h.insert(header::HOST, HeaderValue::from_static("client.example"));
    h.append("X-Forwarded-For", HeaderValue::from_static("10.0.0.1"));
    h.append(header::ACCEPT, HeaderValue::from_static("*/*"));
    h.append(header::ACCEPT, HeaderValue::from_static("text/html"));
    let host = HeaderValue::from_static("up:8080");
    let head = |method, fields: &HeaderMap| {
        let mut out = Vec::new();
        RequestHead {
            method,
            target: "/a?b=1",
            host: &host,
            fields: fields.iter().map(|(n, v)| (n, v.as_bytes())),
        }
        .encode(
            &mut out,
            if method == Method::POST {
                Some(3)
            } else {
                None
            },
        );
        String::from_utf8(out).unwrap()
    };
    assert_eq!(
        head(&Method::POST, &h),
        "POST /a?b=1 HTTP/1.1\r\nhost: up:8080\r\nx-forwarded-for: 10.0.0.1\r\naccept: */*\r\naccept: text/html\r\ncontent-length: 3\r\n\r\n"
    );
    // A Content-Length already there is not repeated; no body, none added.
    let mut h2 = h.clone();
    h2.insert(header::CONTENT_LENGTH, HeaderValue::from_static("3"));
    assert_eq!(
        head(&Method::POST, &h2).matches("content-length").count(),
        1
    );
    let out = head(&Method::GET, &HeaderMap::new());
    assert_eq!(out, "GET /a?b=1 HTTP/1.1\r\nhost: up:8080\r\n\r\n");
}

fn dechunk_all(input: &[u8], step: usize) -> Result<(Vec<u8>, Option<HeaderMap>), ClientError> {
    let mut d = dechunk();
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut trailers = None;
    let mut fed = 0;
    loop {
        match d.decode(&mut buf)? {
            Decoded::Data(b) => out.extend_from_slice(&b),
            Decoded::Trailers(t) => trailers = Some(t),
            Decoded::End => return Ok((out, trailers)),
            Decoded::NeedMore => {
                if fed >= input.len() {
                    panic!("decoder wants more after all {} bytes", input.len());
                }
                let end = (fed + step).min(input.len());
                buf.extend_from_slice(&input[fed..end]);
                fed = end;
            }
        }
    }
}

#[test]
fn chunked_bodies_decode_whatever_the_read_boundaries() {
    let input = b"5\r\nhello\r\n1;ext=\"x\"\r\n \r\nA \r\n0123456789\r\n0\r\nX-Sum: abc\r\nX-Two: 2\r\n\r\n";
    for step in 1..input.len() {
        let (body, trailers) = dechunk_all(input, step).unwrap();
        assert_eq!(body, b"hello 0123456789", "step {step}");
        let t = trailers.expect("trailers");
        assert_eq!(t["x-sum"], "abc");
        assert_eq!(t["x-two"], "2");
    }
    let (body, trailers) = dechunk_all(b"0\r\n\r\n", 1).unwrap();
    assert!(body.is_empty() && trailers.is_none());
}

#[test]
fn malformed_chunked_bodies_are_errors() {
    for bad in [
        &b"x\r\n"[..],
        b"5\r\nhelloXX",
        b"-5\r\n",
        b"11111111111111111\r\n",
        b"5 x\r\n",
        b"\r\n",
        b"0\r\nbad trailer\r\n\r\n",
    ] {
        assert!(
            dechunk_all(bad, bad.len()).is_err(),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
}

struct Told(std::sync::Arc<std::sync::Mutex<Option<bool>>>);

impl Finish for Told {
    fn finish(self, conn: Option<Conn>) {
        *self.0.lock().unwrap() = Some(conn.is_some());
    }
}

async fn collect<F: Finish + Unpin>(b: ResponseBody<F>) -> Result<Vec<u8>, ClientError> {
    use http_body_util::BodyExt;
    let c = b.collect().await?;
    Ok(c.to_bytes().to_vec())
}

type Outcome = std::sync::Arc<std::sync::Mutex<Option<bool>>>;

/// A response body whose upstream has sent `sent` (and closed, unless it is
/// handed back to send more), with what its `Finish` was told.
async fn body_after(
    sent: &[u8],
) -> (
    ResponseBody<Told>,
    Outcome,
    Framing,
    tokio::io::DuplexStream,
) {
    use tokio::io::AsyncWriteExt;
    let (ours, mut theirs) = tokio::io::duplex(64);
    let told = Outcome::default();
    let mut conn = Conn::new(Box::new(ours));
    theirs.write_all(sent).await.unwrap();
    let head = conn.read_head(false).await.unwrap();
    let framing = head.framing;
    assert!(conn.take_buffered(framing).is_none());
    let body = ResponseBody::new(conn, framing, head.keep_alive, Told(told.clone()));
    (body, told, framing, theirs)
}

#[tokio::test]
async fn bodies_stream_and_give_the_connection_back_only_when_clean() {
    use tokio::io::AsyncWriteExt;
    // Content-Length over several writes: the connection is reused.
    let (body, told, framing, mut theirs) =
        body_after(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n01234").await;
    assert_eq!(framing, Framing::Length(10));
    let w = tokio::spawn(async move {
        theirs.write_all(b"56789").await.unwrap();
        theirs
    });
    assert_eq!(collect(body).await.unwrap(), b"0123456789");
    assert_eq!(*told.lock().unwrap(), Some(true));
    let _theirs = w.await.unwrap();

    // Until close: the body ends at the close, and the connection with it.
    let (body, told, _, theirs) = body_after(b"HTTP/1.1 200 OK\r\n\r\nall of it").await;
    drop(theirs);
    assert_eq!(collect(body).await.unwrap(), b"all of it");
    assert_eq!(*told.lock().unwrap(), Some(false));

    // Cut short: an error, and the connection is not reused.
    let (body, told, _, theirs) =
        body_after(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab").await;
    drop(theirs);
    assert!(matches!(collect(body).await, Err(ClientError::Truncated)));
    assert_eq!(*told.lock().unwrap(), Some(false));

    // Dropped before its end (the client left): closed, not pooled.
    let (body, told, _, _theirs) =
        body_after(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nab").await;
    drop(body);
    assert_eq!(*told.lock().unwrap(), Some(false));
}

#[tokio::test]
async fn a_closed_idle_connection_is_noticed() {
    let (ours, theirs) = tokio::io::duplex(64);
    let mut conn = Conn::new(Box::new(ours));
    assert!(conn.is_idle_and_open());
    drop(theirs);
    assert!(!conn.is_idle_and_open());
    // Nothing came back at all.
    let (ours, theirs) = tokio::io::duplex(64);
    let mut conn = Conn::new(Box::new(ours));
    drop(theirs);
    let e = conn.read_head(false).await.unwrap_err();
    assert!(matches!(e, ClientError::Closed) && e.is_closed_before_response());
}

/// Deterministic fuzzing of the response side (the same property as the
/// `h1_response` cargo-fuzz target): mutated and cut responses never panic,
/// never yield more body than sent or declared, and decode the same however
/// the reads are split.
#[test]
fn responses_hold_up_under_mutation() {
    let seeds: [&[u8]; 6] = [
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;a=b\r\nhello\r\n0\r\nX-T: 1\r\n\r\n",
        b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
        b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\nuntil close",
        b"HTTP/1.1 200 OK\r\nContent-Length: 3, 3\r\nTransfer-Encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        b"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n",
    ];
    let alphabet = b" \t\r\n:;,0123456789abcdefABCDEFHTPkx\x00\x7f\xff";
    let mut rng = fastrand::Rng::with_seed(0x5eed_2222);
    for _ in 0..30_000 {
        let input = weir_http::test_support::mutated(&mut rng, &seeds, alphabet);
        check_response(&input, rng.usize(1..16));
    }
}

/// The connection's response timer gives every exchange its whole limit,
/// counted from its own start, after the timer fired while the connection
/// was idle and when a later limit is shorter than the one it is armed for.
#[tokio::test(start_paused = true)]
async fn the_response_timer_times_each_exchange_from_its_start() {
    use std::time::Duration;
    use tokio::time::{Instant, sleep};
    let ms = Duration::from_millis;
    let mut t = ResponseTimer::new();
    assert_eq!(
        t.within(ms(100), std::pin::pin!(sleep(ms(60)))).await,
        Some(())
    );
    // Idle past the first deadline: the timer fires with no one waiting.
    sleep(ms(500)).await;
    assert_eq!(
        t.within(ms(100), std::pin::pin!(sleep(ms(90)))).await,
        Some(())
    );
    assert_eq!(
        t.within(ms(100), std::pin::pin!(sleep(ms(99)))).await,
        Some(())
    );
    let start = Instant::now();
    assert_eq!(
        t.within(ms(100), std::pin::pin!(sleep(ms(150)))).await,
        None
    );
    assert_eq!(start.elapsed(), ms(100));
    // A longer limit, then a shorter one than the timer is armed for.
    assert_eq!(
        t.within(ms(10_000), std::pin::pin!(sleep(ms(5)))).await,
        Some(())
    );
    let start = Instant::now();
    assert_eq!(
        t.within(ms(50), std::pin::pin!(std::future::pending::<()>()))
            .await,
        None
    );
    assert_eq!(start.elapsed(), ms(50));
}

mod deadline {
    use super::super::ResponseTimer;
    use std::time::Duration;
    use tokio::time::{Instant, sleep};

    /// A timer that never wakes its task would hang the test: fail instead.
    async fn bounded<T>(f: impl Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(60), f)
            .await
            .expect("the timer did not wake the waiting task")
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_in_time_is_returned() {
        let mut d = ResponseTimer::new();
        let got = d
            .within(
                Duration::from_secs(5),
                std::pin::pin!(async {
                    sleep(Duration::from_secs(1)).await;
                    7
                }),
            )
            .await;
        assert_eq!(got, Some(7));
    }

    #[tokio::test(start_paused = true)]
    async fn time_runs_out_at_the_limit() {
        let mut d = ResponseTimer::new();
        let start = Instant::now();
        let got = bounded(d.within(
            Duration::from_secs(3),
            std::pin::pin!(std::future::pending::<()>()),
        ))
        .await;
        assert_eq!(got, None);
        assert_eq!(start.elapsed(), Duration::from_secs(3));
    }

    /// The timer armed for an earlier exchange fires during a later one
    /// with a later deadline: it is moved on, not taken as the end.
    #[tokio::test(start_paused = true)]
    async fn an_earlier_exchanges_deadline_does_not_cut_a_later_one_short() {
        let mut d = ResponseTimer::new();
        assert_eq!(
            d.within(Duration::from_secs(2), std::pin::pin!(async { 1 }))
                .await,
            Some(1)
        );
        sleep(Duration::from_secs(1)).await;
        // Deadline now + 5 s; the timer is still armed for the first one's
        // (1 s from now).
        let start = Instant::now();
        let got = bounded(d.within(
            Duration::from_secs(5),
            std::pin::pin!(async {
                sleep(Duration::from_secs(4)).await;
                2
            }),
        ))
        .await;
        assert_eq!(got, Some(2));
        assert_eq!(start.elapsed(), Duration::from_secs(4));
        // And the next one still times out on time.
        let start = Instant::now();
        let got = bounded(d.within(
            Duration::from_secs(3),
            std::pin::pin!(std::future::pending::<()>()),
        ))
        .await;
        assert_eq!(got, None);
        assert_eq!(start.elapsed(), Duration::from_secs(3));
    }

    /// One connection serves requests from different tasks: the timer must
    /// wake the task waiting now, not the one that used it before.
    #[tokio::test(start_paused = true)]
    async fn the_timer_wakes_the_task_that_waits_now() {
        let d = ResponseTimer::new();
        let d = tokio::spawn(async move {
            let mut d = d;
            assert_eq!(
                d.within(Duration::from_secs(1), std::pin::pin!(async { 1 }))
                    .await,
                Some(1)
            );
            d
        })
        .await
        .unwrap();
        let start = Instant::now();
        let waiting = tokio::spawn(async move {
            let mut d = d;
            let got = d
                .within(
                    Duration::from_secs(2),
                    std::pin::pin!(std::future::pending::<()>()),
                )
                .await;
            (got, d)
        });
        let (got, _) = bounded(waiting).await.unwrap();
        assert_eq!(got, None);
        assert_eq!(start.elapsed(), Duration::from_secs(2));
    }

    /// A request dropped mid-way (its client went away) leaves the
    /// connection's timer usable by the next one.
    #[tokio::test(start_paused = true)]
    async fn a_dropped_exchange_leaves_the_timer_working() {
        let mut d = ResponseTimer::new();
        let cut = tokio::time::timeout(
            Duration::from_millis(500),
            d.within(
                Duration::from_secs(10),
                std::pin::pin!(std::future::pending::<()>()),
            ),
        )
        .await;
        assert!(cut.is_err());
        let start = Instant::now();
        let got = bounded(d.within(
            Duration::from_secs(1),
            std::pin::pin!(std::future::pending::<()>()),
        ))
        .await;
        assert_eq!(got, None);
        assert_eq!(start.elapsed(), Duration::from_secs(1));
    }
}

/// Streamed request bodies and upgrades, against an upstream on an
/// in-memory pipe.
mod streamed {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn frames(
        parts: Vec<Frame<Bytes>>,
    ) -> impl http_body::Body<Data = Bytes, Error = std::io::Error> + Send + 'static {
        http_body_util::StreamBody::new(futures_util::stream::iter(
            parts.into_iter().map(Ok::<_, std::io::Error>),
        ))
    }

    fn head<'a>(
        method: &'a Method,
        host: &'a HeaderValue,
        fields: &'a HeaderMap,
    ) -> RequestHead<'a, impl Iterator<Item = (&'a HeaderName, &'a [u8])>> {
        RequestHead {
            method,
            target: "/up",
            host,
            fields: fields.iter().map(|(n, v)| (n, v.as_bytes())),
        }
    }

    /// Reads from the upstream's end until `end` has arrived (and what came
    /// with it).
    async fn read_until(s: &mut tokio::io::DuplexStream, end: &[u8]) -> Vec<u8> {
        let mut got = Vec::new();
        let mut b = [0u8; 4096];
        while !got.windows(end.len()).any(|w| w == end) {
            let n = s.read(&mut b).await.unwrap();
            assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&b[..n]);
        }
        got
    }

    #[tokio::test]
    async fn a_body_of_known_length_goes_out_as_it_is() {
        let (ours, mut theirs) = tokio::io::duplex(64 * 1024);
        let mut c = Conn::new(Box::new(ours));
        let mut fields = HeaderMap::new();
        fields.insert(header::CONTENT_LENGTH, HeaderValue::from_static("11"));
        let body = Body::stream(frames(vec![
            Frame::data(Bytes::from_static(b"hello")),
            Frame::data(Bytes::from_static(b" world")),
        ]));
        let host = HeaderValue::from_static("up");
        let (req, chunked) = Encoded::streamed(head(&Method::POST, &host, &fields), &body);
        assert!(!chunked);
        let upstream = tokio::spawn(async move {
            let got = read_until(&mut theirs, b"hello world").await;
            theirs
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                .await
                .unwrap();
            (got, theirs)
        });
        let h = c
            .send_streamed(
                req,
                &mut Uploading::new(body, chunked, Vec::new()),
                Expect::Response,
            )
            .await
            .unwrap();
        let (got, _theirs) = upstream.await.unwrap();
        assert_eq!(
            String::from_utf8(got).unwrap(),
            "POST /up HTTP/1.1\r\nhost: up\r\ncontent-length: 11\r\n\r\nhello world"
        );
        assert_eq!(h.parts.status, StatusCode::OK);
        assert!(h.keep_alive, "the whole body went out: reusable");
    }

    #[tokio::test]
    async fn a_body_of_unknown_length_goes_chunked_with_its_declared_trailers() {
        let (ours, mut theirs) = tokio::io::duplex(64 * 1024);
        let mut c = Conn::new(Box::new(ours));
        let mut fields = HeaderMap::new();
        fields.insert(header::TRAILER, HeaderValue::from_static("x-sum"));
        let mut t = HeaderMap::new();
        t.insert("x-sum", HeaderValue::from_static("42"));
        t.insert("x-undeclared", HeaderValue::from_static("1"));
        let body = Body::stream(frames(vec![
            Frame::data(Bytes::from_static(b"hello")),
            Frame::data(Bytes::new()),
            Frame::data(Bytes::from(vec![b'x'; 300])),
            Frame::trailers(t),
        ]));
        let host = HeaderValue::from_static("up");
        let (req, chunked) = Encoded::streamed(head(&Method::POST, &host, &fields), &body);
        assert!(chunked);
        let upstream = tokio::spawn(async move {
            let got = read_until(&mut theirs, b"\r\n0\r\nx-sum: 42\r\n\r\n").await;
            theirs
                .write_all(b"HTTP/1.1 204 No Content\r\n\r\n")
                .await
                .unwrap();
            (got, theirs)
        });
        let trailers = [HeaderName::from_static("x-sum")];
        let h = c
            .send_streamed(
                req,
                &mut Uploading::new(body, chunked, trailers.to_vec()),
                Expect::Response,
            )
            .await
            .unwrap();
        let (got, _theirs) = upstream.await.unwrap();
        let want = format!(
            "POST /up HTTP/1.1\r\nhost: up\r\ntrailer: x-sum\r\ntransfer-encoding: chunked\r\n\r\n\
             5\r\nhello\r\n12C\r\n{}\r\n0\r\nx-sum: 42\r\n\r\n",
            "x".repeat(300)
        );
        assert_eq!(String::from_utf8(got).unwrap(), want);
        // What was sent decodes with weir's own decoder to the same body.
        let mut buf = BytesMut::from(&want.as_bytes()[want.find("\r\n\r\n").unwrap() + 4..]);
        let mut d = Decoder::chunked(1024);
        let mut n = 0;
        loop {
            match d.decode(&mut buf).unwrap() {
                Decoded::Data(b) => n += b.len(),
                Decoded::Trailers(t) => assert_eq!(t["x-sum"], "42"),
                Decoded::End => break,
                Decoded::NeedMore => panic!("incomplete"),
            }
        }
        assert_eq!(n, 305);
        assert_eq!(h.parts.status, StatusCode::NO_CONTENT);
        assert!(h.keep_alive);
    }

    /// An upstream that answers 413 without reading the body: the answer is
    /// returned, the upload stops, and the connection is not reused.
    #[tokio::test]
    async fn an_early_answer_ends_the_upload() {
        let (ours, mut theirs) = tokio::io::duplex(16 * 1024);
        let mut c = Conn::new(Box::new(ours));
        let fields = HeaderMap::new();
        let chunk = Bytes::from(vec![b'x'; 8192]);
        // Endless: only the answer can end this exchange.
        let body = Body::stream(http_body_util::StreamBody::new(
            futures_util::stream::repeat_with(move || {
                Ok::<_, std::io::Error>(Frame::data(chunk.clone()))
            }),
        ));
        let host = HeaderValue::from_static("up");
        let (req, chunked) = Encoded::streamed(head(&Method::PUT, &host, &fields), &body);
        let upstream = tokio::spawn(async move {
            read_until(&mut theirs, b"\r\n\r\n").await;
            theirs
                .write_all(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 4\r\n\r\nbig!")
                .await
                .unwrap();
            theirs
        });
        let mut upload = Uploading::new(body, chunked, Vec::new());
        let h = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            c.send_streamed(req, &mut upload, Expect::Response),
        )
        .await
        .expect("the early answer ends the exchange")
        .unwrap();
        let _theirs = upstream.await.unwrap();
        assert_eq!(h.parts.status, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(!upload.is_sent(), "half a body went out: never reused");
        assert!(upload.into_untouched().is_none());
        assert_eq!(c.take_buffered(h.framing).unwrap(), "big!");
    }

    /// An upstream that answers as it reads (an echo): the response body
    /// goes on sending the request body, and the connection is reusable
    /// once both have ended.
    #[tokio::test]
    async fn the_upload_goes_on_while_an_echo_answers() {
        let (ours, mut theirs) = tokio::io::duplex(1024);
        let mut c = Conn::new(Box::new(ours));
        let mut fields = HeaderMap::new();
        fields.insert(header::CONTENT_LENGTH, HeaderValue::from_static("10000"));
        let body = Body::stream(frames(
            (0..10)
                .map(|_| Frame::data(Bytes::from(vec![b'e'; 1000])))
                .collect(),
        ));
        let host = HeaderValue::from_static("up");
        let (req, chunked) = Encoded::streamed(head(&Method::POST, &host, &fields), &body);
        let upstream = tokio::spawn(async move {
            let got = read_until(&mut theirs, b"\r\n\r\n").await;
            let at = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
            let mut n = got.len() - at;
            theirs
                .write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                .await
                .unwrap();
            if n > 0 {
                theirs
                    .write_all(format!("{n:x}\r\n").as_bytes())
                    .await
                    .unwrap();
                theirs.write_all(&got[at..]).await.unwrap();
                theirs.write_all(b"\r\n").await.unwrap();
            }
            let mut b = [0u8; 512];
            while n < 10_000 {
                let k = theirs.read(&mut b).await.unwrap();
                assert!(k > 0);
                n += k;
                theirs
                    .write_all(format!("{k:x}\r\n").as_bytes())
                    .await
                    .unwrap();
                theirs.write_all(&b[..k]).await.unwrap();
                theirs.write_all(b"\r\n").await.unwrap();
            }
            theirs.write_all(b"0\r\n\r\n").await.unwrap();
            theirs
        });
        let mut upload = Uploading::new(body, chunked, Vec::new());
        let h = c
            .send_streamed(req, &mut upload, Expect::Response)
            .await
            .unwrap();
        assert!(!upload.is_sent(), "the pipe is smaller than the body");
        let told = Outcome::default();
        let body = ResponseBody::new(c, h.framing, h.keep_alive, Told(told.clone()))
            .sending(Some(Box::new(upload)));
        let echoed = tokio::time::timeout(std::time::Duration::from_secs(10), collect(body))
            .await
            .expect("the echo ends")
            .unwrap();
        assert_eq!(echoed, vec![b'e'; 10_000]);
        assert_eq!(*told.lock().unwrap(), Some(true), "reusable");
        drop(upstream.await.unwrap());
    }

    /// A write the upstream refused by going away stops the upload; with no
    /// answer, the exchange fails having sent something (no blind retry).
    #[tokio::test]
    async fn an_upstream_gone_mid_body_fails_after_sending() {
        let (ours, mut theirs) = tokio::io::duplex(1024);
        let mut c = Conn::new(Box::new(ours));
        let mut fields = HeaderMap::new();
        fields.insert(header::CONTENT_LENGTH, HeaderValue::from_static("100000"));
        let body = Body::stream(frames(vec![Frame::data(Bytes::from(vec![b'y'; 100_000]))]));
        let host = HeaderValue::from_static("up");
        let (req, chunked) = Encoded::streamed(head(&Method::POST, &host, &fields), &body);
        let upstream = tokio::spawn(async move {
            read_until(&mut theirs, b"\r\n\r\n").await;
            drop(theirs);
        });
        let r = c
            .send_streamed(
                req,
                &mut Uploading::new(body, chunked, Vec::new()),
                Expect::Response,
            )
            .await;
        upstream.await.unwrap();
        match r {
            Err(StreamError::Upstream {
                nothing_sent,
                body_untouched,
                ..
            }) => assert!(!nothing_sent && !body_untouched),
            other => panic!("{other:?}"),
        }
    }

    /// A client body that fails is the client's fault, not the upstream's.
    #[tokio::test]
    async fn a_failing_client_body_is_told_apart() {
        let (ours, mut theirs) = tokio::io::duplex(64 * 1024);
        let mut c = Conn::new(Box::new(ours));
        let fields = HeaderMap::new();
        let body = Body::stream(http_body_util::StreamBody::new(futures_util::stream::iter(
            [
                Ok(Frame::data(Bytes::from_static(b"a"))),
                Err(std::io::Error::other("client went away")),
            ],
        )));
        let host = HeaderValue::from_static("up");
        let (req, chunked) = Encoded::streamed(head(&Method::POST, &host, &fields), &body);
        let keep = tokio::spawn(async move {
            read_until(&mut theirs, b"\r\n\r\n").await;
            theirs
        });
        let r = c
            .send_streamed(
                req,
                &mut Uploading::new(body, chunked, Vec::new()),
                Expect::Response,
            )
            .await;
        assert!(matches!(r, Err(StreamError::Body(_))), "{r:?}");
        drop(keep.await);
    }

    /// A 101 to an Upgrade request is its answer, and what the upstream sent
    /// right after it comes first out of the handed-over connection.
    #[tokio::test]
    async fn a_101_hands_over_the_connection_with_the_bytes_past_it() {
        let (ours, mut theirs) = tokio::io::duplex(64 * 1024);
        let mut c = Conn::new(Box::new(ours));
        let mut fields = HeaderMap::new();
        fields.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        fields.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        let body = Body::empty();
        let host = HeaderValue::from_static("up");
        let (req, chunked) = Encoded::streamed(head(&Method::GET, &host, &fields), &body);
        assert!(!chunked);
        theirs
            .write_all(b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\nearly")
            .await
            .unwrap();
        let h = c
            .send_streamed(
                req,
                &mut Uploading::new(body, chunked, Vec::new()),
                Expect::Upgrade,
            )
            .await
            .unwrap();
        assert_eq!(h.parts.status, StatusCode::SWITCHING_PROTOCOLS);
        assert!(!h.keep_alive);
        let got = read_until(&mut theirs, b"\r\n\r\n").await;
        assert_eq!(
            String::from_utf8(got).unwrap(),
            "GET /up HTTP/1.1\r\nhost: up\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n",
            "no body framing on an Upgrade without a body"
        );
        let mut up = c.into_upgraded();
        theirs.write_all(b" late").await.unwrap();
        let mut b = [0u8; 10];
        up.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"early late");
        up.write_all(b"back").await.unwrap();
        let mut b = [0u8; 4];
        theirs.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"back");
        // Without the Upgrade, a 101 is still refused.
        let mut switch = BytesMut::from(&b"HTTP/1.1 101 Switching Protocols\r\n\r\n"[..]);
        assert!(matches!(
            parse_response(&mut switch, false, false),
            Err(HeadError::UnexpectedSwitch)
        ));
    }
}
