//! pmm — the Persistent Mind Model in Rust.
//!
//! An LLM agent whose whole mind is an append-only, sha256 hash-chained ledger of events kept in
//! one SQLite file. This library holds everything the `pmm-*` programs do; each program's `main`
//! is a few lines of wiring over [`cmd`].
//!
//! Layers, bottom up (docs/architecture.md has the table, which a test checks against the
//! code): [`canon`] (CPython-compatible canonical JSON, the bytes that are hashed), [`pystr`],
//! [`formats`], [`lines`] (the bounded line reader) and [`outfile`] (output files
//! beside their target); [`event`]; [`error`] (it names the kinds), [`chain`] (digests and verification), [`marker`] and
//! [`metrics`]; [`projection`] (the folds) and [`vector`] (the
//! nearest-neighbour engine); [`store`] (the only SQL) and [`llm`] (the only
//! network) at the edges; [`claim`], [`recall`], [`context`] and [`interchange`] (import and
//! export formats: it reads files, and stdin for `-`); [`turn`], [`kernel`] and [`audit`];
//! [`mcp`] (the MCP server's tools) and [`cli`]; [`cmd`] on top. Only [`cli`] and [`cmd`] touch
//! clap, stdout, stderr or the exit code.

pub mod audit;
pub mod canon;
pub mod chain;
pub mod claim;
pub mod cli;
pub mod cmd;
pub mod context;
pub mod error;
pub mod event;
pub mod formats;
pub mod interchange;
pub mod kernel;
pub mod lines;
pub mod llm;
pub mod marker;
pub mod mcp;
pub mod metrics;
pub mod outfile;
pub mod projection;
pub mod pystr;
pub mod recall;
pub mod session;
pub mod store;
pub mod turn;
pub mod vector;

pub use error::{Error, Result};

#[doc(hidden)]
pub use mimalloc;

/// Declares the programs' allocator; each `bin/` file invokes it once (a library does not
/// choose its users' allocator). The readers parse and hash on worker threads and hand events
/// back to the calling thread, which frees them: a cross-thread free pattern under which
/// glibc's malloc spends much of its time on arena locks; mimalloc frees across threads without
/// contention.
#[macro_export]
macro_rules! global_allocator {
    () => {
        #[global_allocator]
        static GLOBAL: $crate::mimalloc::MiMalloc = $crate::mimalloc::MiMalloc;
    };
}
