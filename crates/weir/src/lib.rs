//! weir: a web server, reverse proxy, load balancer and HTTP cache.
//!
//! The binary (`main.rs`) parses the command line and hands a validated
//! [`config::Config`] to [`server::run`]. A request's way through the code:
//! `server::run` (sockets, workers) → `server::conn` (TLS, ALPN) →
//! `server::http1` (weir's HTTP/1.1 loop for GET/HEAD) or hyper →
//! `site::Listener::handle` (limits, site by Host) → a handler such as
//! `static_files::StaticFiles::serve` → back through `site` (error pages,
//! headers, access log). `docs/request-lifecycle.md` walks it in detail.

pub mod access_log;
pub mod body;
pub mod clock;
pub mod config;
pub mod header_maps;
pub mod http3;
pub mod proxy;
pub mod server;
pub mod site;
pub mod static_files;
pub mod tls;
pub mod welcome;

#[cfg(test)]
mod test_support;
