//! The ledger as memory for Model Context Protocol clients: the tools and resources of
//! `pmm-mcp`, each a thin call into the library (recall, append, project, scan, verify).
//!
//! [`tools`] holds the tools as plain synchronous functions over a [`Config`] (so tests and
//! other front ends can call them without a protocol); [`server`] is the MCP face of them,
//! built on the official Rust SDK (`rmcp`). Every write goes through
//! [`crate::store::Ledger::begin`], the write policy and the hash chain exactly as
//! `pmm-append` does, one short `BEGIN IMMEDIATE` transaction per call, so `pmm-mcp`,
//! `pmm-turn` and a cron `pmm-tick` can share one ledger.

pub mod admin;
pub mod framing;
pub mod gate;
pub mod http;
pub mod server;
pub mod tokens;
pub mod tools;
pub mod verify;

pub use server::Server;
pub use tools::{Config, ToolError};

use crate::event::Kind;

/// The largest `text`/`query` a tool accepts, in bytes.
pub const MAX_TEXT: usize = 1 << 20;
/// The largest `k` of `recall`.
pub const MAX_K: u64 = 1_000;
/// The largest `budget` of `recall`.
pub const MAX_BUDGET: u64 = 1_000_000;
/// The largest `limit` of `events`.
pub const MAX_LIMIT: u64 = 10_000;
/// `events` without a `limit`.
pub const DEFAULT_LIMIT: u64 = 100;
/// `events` stops adding events once their contents reach this many bytes (and says so), so
/// one call cannot build a reply of gigabytes.
pub const MAX_REPLY_CONTENT: usize = 8 << 20;
/// `verify` returns at most this many findings (and counts them all).
pub const MAX_FINDINGS: usize = 100;
/// The kinds `remember` writes: messages and notes, never a sensitive or a derived kind.
pub const REMEMBER_KINDS: &[&str] = &[
    Kind::Reflection.as_str(),
    Kind::UserMessage.as_str(),
    Kind::AssistantMessage.as_str(),
];
/// The actor (`meta.source`) of everything `pmm-mcp` writes.
pub const SOURCE: &str = crate::event::Source::Mcp.as_str();
