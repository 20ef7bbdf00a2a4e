//! `weir-bench compare`: runs scenarios against weir and its competitors.

pub mod cli;
pub mod limits;
pub mod procstat;
