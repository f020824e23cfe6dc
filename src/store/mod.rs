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
//! - [`Ledger`] and [`Batch`] (`ledger`), opened through one place (`open`): what every
//!   program opens — a SQLite file, or a PostgreSQL ledger as this host runs it
//!   ([`replica::Cached`]), told apart by the `--db` argument. Reads go to the SQLite part
//!   (the file, or the cache); writes go through the handle, so that a PostgreSQL ledger's
//!   always lock the server's head and push.
//! - [`sqlite`]: a ledger file (the reference's format) with its derived indexes beside the
//!   events; it knows nothing of PostgreSQL. Its other items are re-exported here
//!   (`store::Derived`, `store::Head`, …).
//! - [`postgres`]: the ledger on a PostgreSQL server, shared by writers on several hosts; it
//!   knows nothing of SQLite.
//! - [`replica`]: a PostgreSQL ledger as one host sees it, [`replica::Cached`] — the server's
//!   log and this host's cache file (the SQLite kind) as two fields of one type, under the
//!   contract suite: appends lock the server's head row, catch the cache up inside its own
//!   transaction, write on the cache, push, and commit the server then the cache.
//!
//! SQL lives only in the backends (`sqlite/`, `postgres/`): `replica` keeps its cache file
//! through the SQLite backend's methods.

pub mod indexes;
mod ledger;
pub mod log;
pub mod memory;
pub mod notices;
mod open;
pub mod postgres;
pub mod replica;
pub mod sqlite;

pub use indexes::Indexes;
pub use ledger::{Batch, Ledger};
pub use log::EventLog;
pub use open::{
    check_url, exists, file_identity, is_postgres_url, server_reader, shown, shown_url, Fresh,
};
// Everything else programs name of a ledger file (its derived parts, limits, path rules) is
// the SQLite backend's; `Ledger`, `Batch` and `Fresh` above are the handles over both kinds.
pub use sqlite::*;

#[cfg(test)]
mod contract;
