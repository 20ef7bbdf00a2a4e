//! weir-bench: an honest load generator ([`load`]), a fast test upstream
//! ([`backend`]) and a side-by-side harness that runs weir against nginx,
//! Apache, Caddy, HAProxy, Varnish and lighttpd ([`compare`]), a holder of
//! idle connections ([`hold`]), and a byte relay that is the floor for any
//! proxy ([`relay`]).
//!
//! The generator must never be the bottleneck it measures: see [`load`] for
//! how it stays lock-free per request, and how it reports when it is CPU-bound.

pub mod backend;
pub mod compare;
pub mod hold;
pub mod load;
pub mod relay;
