//! weir: a web server, reverse proxy, load balancer and HTTP cache.
//!
//! The binary (`main.rs`) parses the command line and hands a validated
//! [`config::Config`] to [`server::run`]; everything else lives here so that
//! unit tests can reach it.

pub mod body;
pub mod static_files;
