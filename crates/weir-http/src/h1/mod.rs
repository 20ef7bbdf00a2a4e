//! HTTP/1.1 message bodies as the server reads them: the body [`Decoder`]
//! (Content-Length and chunked, with extensions and trailers) over bytes in
//! memory, and the request body a handler receives ([`Incoming`]), fed by
//! the connection loop through its [`Sender`].
//!
//! Owns the one chunk-size parser of weir ([`chunk_size`]); the smuggling
//! guard and the decoder share it and the field-line rules, so there is one
//! strict reading of HTTP/1.1 framing. Never does I/O, never buffers more
//! than one chunk line or one trailer section.

mod body;
mod decode;

pub use body::{Feed, Incoming, IncomingError, Sender, channel};
pub use decode::{DecodeError, Decoded, Decoder, chunk_size};
