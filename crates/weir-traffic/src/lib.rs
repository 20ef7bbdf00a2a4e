//! Traffic control for weir's request filters: the limiters as plain state
//! machines with time passed in ([`rate`]: nginx's `limit_req` leaky
//! bucket; [`window`]: HAProxy's sliding-window rates), so that every count
//! is exact and testable with a simulated clock; [`table`]: per-key state
//! bounded in keys, evicting the least recently used; [`limit`]: one
//! configured limit, keying requests and saying pass, delay or refuse;
//! [`password`]: basic-authentication hashes, checked once per credential;
//! [`shared`]: limit counts exchanged with the other processes of a cluster;
//! [`clock`]: the one clock the request filters and the exchange pass in.
//!
//! The limiters never read a clock and nothing here answers a request (the
//! pipeline's request filters do).

pub mod clock;
pub mod limit;
pub mod password;
pub mod rate;
pub mod shared;
pub mod table;
pub mod window;
