//! The contract suite on [`Cached`], the type every program's PostgreSQL ledger is
//! (`store::Ledger::Cached`): its appends lock the server's head, catch the cache up, write
//! on the cache, push and commit the server then the cache, on the throwaway server of
//! `store/postgres/tests.rs`. Its connections are two hosts, each with a cache file of its own
//! that the connections of that host share, as programs on one host do.

use super::{open_with_cache, Cached};
use crate::store::contract::Fresh;
use crate::store::postgres::tests::Postgres;
use std::sync::atomic::{AtomicUsize, Ordering};

/// An empty PostgreSQL ledger and the cache directories of its hosts.
pub(crate) struct CachedPg {
    pg: Postgres,
    hosts: tempfile::TempDir,
    /// How many connections were opened (they alternate between two hosts).
    opened: AtomicUsize,
}

impl CachedPg {
    /// `None` without server binaries (unless `PMM_REQUIRE_POSTGRES=1`).
    fn new() -> Option<CachedPg> {
        Some(CachedPg {
            pg: Postgres::new()?,
            hosts: tempfile::tempdir().unwrap(),
            opened: AtomicUsize::new(0),
        })
    }
}

impl Fresh for CachedPg {
    type Conn = Cached;
    fn connect(&self) -> Cached {
        let host = self.opened.fetch_add(1, Ordering::Relaxed) % 2;
        let cache = self.hosts.path().join(format!("host{host}")).join("pg.db");
        open_with_cache(self.pg.url(), true, 30_000, &cache).unwrap()
    }
}

mod contract {
    use crate::store::contract::contract_suite;
    contract_suite!(super::CachedPg::new());
}
