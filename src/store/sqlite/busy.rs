//! How a writer waits for the write lock another holds: by trying again every millisecond,
//! up to its `--busy-timeout`.
//!
//! SQLite's own busy handler (`sqlite3_busy_timeout`) sleeps between tries for times that grow
//! to 100 ms. A writer that waits while others commit back to back (four `pmm-append` streams
//! on one ledger) then tries about ten times a second, and each try comes at a moment the lock
//! is most likely taken again: on a loaded machine it lost every race for its whole 5 s
//! (issue 44, N0). Trying every millisecond gives it a chance at every gap between two
//! transactions, at the cost of a wake-up a millisecond while it waits.

use rusqlite::{ffi, Connection};
use std::cell::Cell;
use std::os::raw::{c_int, c_void};
use std::time::{Duration, Instant};

/// How long to sleep between two tries.
const STEP: Duration = Duration::from_millis(1);

/// One connection's wait: its limit, and when the present wait began.
pub(crate) struct BusyWait {
    limit: Duration,
    since: Cell<Option<Instant>>,
}

impl BusyWait {
    /// Makes `conn` wait up to `busy_ms` for a lock, trying every [`STEP`]. The returned box
    /// must outlive the connection (the ledger keeps it in a field dropped after it).
    pub(crate) fn install(conn: &Connection, busy_ms: u64) -> rusqlite::Result<Box<BusyWait>> {
        let wait = Box::new(BusyWait {
            limit: Duration::from_millis(busy_ms),
            since: Cell::new(None),
        });
        let arg = &*wait as *const BusyWait as *mut c_void;
        // SAFETY: the handle is `conn`'s own; `arg` points into a box that does not move and
        // that the caller keeps until after the connection is closed; SQLite calls the handler
        // only from the thread using the connection.
        let rc = unsafe { ffi::sqlite3_busy_handler(conn.handle(), Some(on_busy), arg) };
        if rc != ffi::SQLITE_OK {
            return Err(rusqlite::Error::SqliteFailure(ffi::Error::new(rc), None));
        }
        Ok(wait)
    }
}

/// SQLite's busy callback: `count` tries so far in this wait; non-zero to try again.
extern "C" fn on_busy(arg: *mut c_void, count: c_int) -> c_int {
    // SAFETY: `arg` is the BusyWait installed with this handler, alive while its connection is.
    let wait = unsafe { &*(arg as *const BusyWait) };
    let now = Instant::now();
    let since = match wait.since.get() {
        Some(t) if count > 0 => t,
        _ => {
            wait.since.set(Some(now));
            now
        }
    };
    if now.duration_since(since) >= wait.limit {
        return 0;
    }
    std::thread::sleep(STEP);
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer waits its whole limit, no more, for a lock another connection keeps.
    #[test]
    fn a_writer_waits_its_limit_for_a_held_lock() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.db");
        let holder = Connection::open(&path).unwrap();
        holder
            .execute_batch("PRAGMA journal_mode=WAL; CREATE TABLE t(x); BEGIN IMMEDIATE")
            .unwrap();
        let waiter = Connection::open(&path).unwrap();
        let _wait = BusyWait::install(&waiter, 150).unwrap();
        for _ in 0..2 {
            let t = Instant::now();
            let r = waiter.execute_batch("BEGIN IMMEDIATE");
            let took = t.elapsed();
            assert!(r.is_err(), "the lock is held");
            assert!(took >= Duration::from_millis(150), "{took:?}");
        }
        holder.execute_batch("COMMIT").unwrap();
        waiter.execute_batch("BEGIN IMMEDIATE; COMMIT").unwrap();
    }
}
