//! weir-bench: load generator, test backend and side-by-side comparison harness.
