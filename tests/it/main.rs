//! End-to-end tests: the real programs on temporary ledgers (`cargo test --test it`), one
//! module per area, sharing the harness.

mod harness;

mod canon;
mod fixture;
mod man;
