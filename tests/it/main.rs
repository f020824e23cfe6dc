//! End-to-end tests: the real programs on temporary ledgers.

mod harness;

mod fixture;
mod man;
