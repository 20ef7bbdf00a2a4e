//! weir's end-to-end tests: the real binary started from configs and driven
//! by real clients. One test binary, a module per area, so the suite links
//! once instead of once per file.

mod access_log;
mod access_log_vars;
mod acme_pebble;
mod admin;
mod apps;
mod cache;
mod cert_files;
mod cli;
mod cluster;
mod compress;
mod h2_parity;
mod h3_proxy;
mod h3_static;
mod h3_workers;
mod http1;
mod import;
mod layer4;
mod lifecycle;
mod local_ca;
mod package;
mod php;
mod proxy_balance;
mod proxy_basic;
mod proxy_health;
mod proxy_large;
mod proxy_nginx;
mod proxy_plain;
mod proxy_smuggling;
mod proxy_streaming;
mod proxy_transports;
mod proxy_upgrade;
mod reload;
mod tls_h2;
mod tls_many_certs;
mod traces;
mod traffic;

/// The binary under test. Only this package's tests know its path, so the
/// support crate takes it as a parameter.
const WEIR: &str = env!("CARGO_BIN_EXE_weir");
