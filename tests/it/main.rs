//! End-to-end tests: the real programs on temporary ledgers (`cargo test --test it`), one
//! module per area, sharing the harness.

mod harness;
mod stub;

mod adapt;
mod architecture;
mod bad_input;
mod canon;
mod chat;
mod concurrency;
mod config_ranges;
mod damage;
mod deep;
mod deep_kinds;
mod derived;
mod embed;
mod fixture;
mod floods;
mod front;
mod fuzz;
mod graph;
mod ids;
mod issue15;
mod keep_ts;
mod llm;
mod man;
mod mcp;
mod merkle;
mod policy;
mod programs;
mod ranges;
mod recall;
mod recall_bench;
mod replay;
mod robust;
mod rsm;
mod skips;
mod stream;
mod tamper;
mod tick;
mod tour;
mod turn;
