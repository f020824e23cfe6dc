//! End-to-end tests: the real programs on temporary ledgers (`cargo test --test it`), one
//! module per area, sharing the harness.

mod harness;
mod stub;

mod bad_input;
mod canon;
mod concurrency;
mod deep;
mod derived;
mod fixture;
mod front;
mod fuzz;
mod graph;
mod keep_ts;
mod llm;
mod man;
mod policy;
mod programs;
mod recall;
mod recall_bench;
mod replay;
mod robust;
mod rsm;
mod tamper;
mod tick;
mod tour;
mod turn;
