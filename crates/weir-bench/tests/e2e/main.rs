//! weir-bench's end-to-end tests: the load generator, backends, relay and
//! `compare` run for real. One test binary, a module per area, so the suite
//! links once instead of once per file.

mod compare;
mod h3;
mod hold;
mod load;
mod relay;
mod tls_h1_flush;
mod tls_h2;
