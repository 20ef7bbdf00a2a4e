//! The HTTP plumbing every stage of weir shares, and no policy of weir's
//! own about what to answer: the response [`body::Body`], what a handler knows of its
//! connection ([`conn::ConnInfo`]), the short error answers
//! ([`response`]), content codings and their negotiation ([`encoding`]),
//! the tag that lets a cached file go out with `sendfile`
//! ([`file_region`]), the per-thread stock of header maps, the coarse
//! clock, the one re-armed timer of every timeout ([`deadline`]), the HTTP/1.1 codec shared by the server and the upstream client
//! (the strict framing rules that refuse smuggling shapes, the body decoder
//! and request body: [`h1`]), the connection hand-over after a
//! protocol switch ([`upgrade`]), and the worker a connection runs on with
//! the per-worker slots of state ([`worker`]). The HTTP semantics every
//! handler shares live here too: `Content-Length` and HTTP-date
//! ([`fields`]), conditional requests ([`conditional`]) and byte ranges
//! ([`range`]): RFC 9110's rules, not choices of weir's, with the stable
//! hash behind ETags and disk names ([`hash`]).
//!
//! Depends on no other weir crate; must never depend on config, TLS or a
//! handler.

pub mod background;
pub mod body;
pub mod clock;
pub mod conditional;
pub mod conn;
pub mod date;
pub mod deadline;
pub mod encoding;
pub mod fields;
pub mod file_region;
pub mod h1;
pub mod hash;
pub mod header_maps;
pub mod metrics;
pub mod range;
pub mod response;
pub mod sync;
pub mod trace;
pub mod upgrade;
pub mod worker;

#[cfg(any(test, feature = "test-support"))]
pub mod test_support;
