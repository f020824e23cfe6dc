//! The ledger's store: the authoritative event log and the indexes derived from it, behind
//! one backend per database.
//!
//! - [`log`]: the event log's small traits ([`log::EventLog`] reads, [`log::Txn`] links and
//!   inserts, [`log::Writer`] runs a write transaction) and the chain's link rule, one for
//!   every backend; `contract` (tests) runs the same cases on each backend.
//! - [`indexes`]: [`Indexes`], the derived indexes' reads (full text, neighbours, vectors,
//!   projection checkpoints). Readers above the store name [`EventLog`] and [`Indexes`],
//!   never a connection: the SQLite backend's own `Reads` trait is private to the store.
//! - [`memory`]: an event log in memory, under the same contract: the turn's and the tick's
//!   unit tests run on it.
//! - [`sqlite`]: a ledger file (the reference's format) with its derived indexes beside the
//!   events; its items are re-exported here (`store::Ledger`, `store::Batch`, …), as every
//!   program opens ledgers through them.
//! - [`postgres`]: the ledger on a PostgreSQL server, shared by writers on several hosts.
//! - [`replica`]: a PostgreSQL ledger as one host sees it — its events and derived indexes in
//!   a local cache file of the SQLite kind, caught up from the server, and appends that lock
//!   the server's head row around the local write session.
//!
//! SQL lives only in the backends (`sqlite/`, `postgres/`): `replica` keeps its cache file
//! through the SQLite backend's methods.

pub mod indexes;
pub mod log;
pub mod memory;
pub mod notices;
pub mod postgres;
pub mod replica;
pub mod sqlite;

pub use indexes::Indexes;
pub use log::EventLog;
pub use sqlite::*;

#[cfg(test)]
mod contract;
