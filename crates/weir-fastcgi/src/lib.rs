//! The FastCGI 1.0 protocol as a codec for weir's FastCGI upstreams:
//! [`proto`] encodes a request's records (BEGIN_REQUEST, PARAMS, STDIN,
//! ABORT_REQUEST) into the caller's buffer and decodes the application's
//! records (STDOUT, STDERR, END_REQUEST) incrementally out of it; [`head`]
//! parses the CGI response head (RFC 3875 §6) at the start of STDOUT.
//!
//! Never does I/O, never spawns or waits, and never holds more than one
//! record of the application's output: the caller owns the connection,
//! its pool and the buffers.
//!
//! Written by hand rather than with fastcgi-client or async-fcgi because
//! those own the connection and buffer the whole response, while weir
//! streams bodies both ways with bounded memory and pools connections
//! itself.
//!
//! ```
//! use bytes::BytesMut;
//! use weir_fastcgi::{Decoder, Event};
//!
//! let mut out = BytesMut::new();
//! weir_fastcgi::begin_request(&mut out, 1, true);
//! weir_fastcgi::params(&mut out, 1, [(&b"SCRIPT_FILENAME"[..], &b"/srv/index.php"[..])]);
//! weir_fastcgi::stdin_end(&mut out, 1);
//! // ... write `out` to the connection, append what is read to `input` ...
//! # let mut input = BytesMut::from(&[1u8, 3, 0, 1, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0][..]);
//! let mut decoder = Decoder::new(1);
//! while let Some(event) = decoder.decode(&mut input)? {
//!     match event {
//!         Event::Stdout(_body) => { /* the CGI head, then the body */ }
//!         Event::Stderr(_log) => { /* log it */ }
//!         Event::End { app_status, .. } => {
//!             assert_eq!(app_status, 0);
//!             break;
//!         }
//!     }
//! }
//! assert!(decoder.ended());
//! # Ok::<(), weir_fastcgi::ProtoError>(())
//! ```

pub mod head;
pub mod proto;

#[cfg(test)]
mod fuzz;

pub use head::{HeadError, parse_head};
pub use proto::{
    Decoder, Event, HEADER_LEN, MAX_CONTENT, Pair, ProtoError, RecordType, abort_request,
    begin_request, decode_pairs, params, stdin, stdin_end,
};
