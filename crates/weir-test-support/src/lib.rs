//! What the end-to-end tests of `weir` and `weir-bench` share, one module
//! per concern. The binary under test is always a parameter: its path
//! (`env!("CARGO_BIN_EXE_weir")`) is known only to the tests of its package.

pub mod browser;
pub mod certs;
pub mod policy_server;
pub mod poll;
pub mod ports;
pub mod process;
pub mod proxy;
pub mod tls;
