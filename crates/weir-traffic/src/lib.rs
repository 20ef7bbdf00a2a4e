//! Traffic control for weir's request filters: the limiters as plain state
//! machines with time passed in ([`rate`]: nginx's `limit_req` leaky
//! bucket; [`window`]: HAProxy's sliding-window rates), so that every count
//! is exact and testable with a simulated clock; [`table`]: per-key state
//! bounded in keys, evicting the least recently used.
//!
//! Owns the arithmetic only: never reads a clock, never keys by client and
//! never answers a request (the pipeline's request filters do).

pub mod rate;
pub mod table;
pub mod window;
