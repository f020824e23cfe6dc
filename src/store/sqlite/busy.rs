//! How writers wait for the write lock: in turn, up to their `--busy-timeout` (issue 44, N0).
//!
//! SQLite's own busy handler (`sqlite3_busy_timeout`) sleeps between tries for times that grow
//! to 100 ms, and a writer that has just committed begins its next transaction microseconds
//! later: a writer waiting while others commit back to back lost every race for its whole wait
//! (four `pmm-append` streams on one ledger, on a loaded machine: 9 of 12 writers failed with a
//! 300 ms wait). Sleeping less does not help; the writer that just committed always comes back
//! first. So writers take turns through a turnstile, an empty file `NAME-turn` beside the
//! ledger, locked with `flock`:
//!
//! - a writer that finds the write lock taken makes the turnstile (the first time) and holds it
//!   while it waits for the lock, trying every millisecond;
//! - every writer, before it begins a write transaction, passes the turnstile when it exists:
//!   it waits for it, then gives it back once its transaction has begun.
//!
//! So a writer that has just committed cannot take the lock again while another waits for it:
//! it waits at the turnstile, which the waiter gives back only once it has the lock. Writers
//! that never wait never make the file. The turnstile is pmm's own file (SQLite never opens
//! it), so opening and closing it cannot release SQLite's `fcntl` locks, as closing a second
//! descriptor of the ledger or its `-shm` would. A program that does not pass it (`sqlite3`, an
//! older pmm) is still kept out by SQLite's locking; it only does not take turns.

use rusqlite::{ffi, Connection};
use std::cell::{Cell, RefCell};
use std::fs::{File, OpenOptions};
use std::os::raw::{c_int, c_void};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long to sleep between two tries, of the lock or of the turnstile.
const STEP: Duration = Duration::from_millis(1);

/// The turnstile of the ledger at `path`: `NAME-turn` beside it.
pub(crate) fn turnstile(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push("-turn");
    PathBuf::from(p)
}

/// `flock(file, LOCK_EX | LOCK_NB)`: whether it was taken.
fn try_lock(file: &File) -> bool {
    // SAFETY: flock on a descriptor this File owns; no memory is involved.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// One connection's waiting: its limit, when the present wait began, and the turnstile.
pub(crate) struct BusyWait {
    limit: Duration,
    since: Cell<Option<Instant>>,
    turnstile: PathBuf,
    /// Between [`BusyWait::enter`] and [`BusyWait::leave`]: a write transaction is beginning.
    beginning: Cell<bool>,
    /// The turnstile, while this connection holds it (its lock goes with the file).
    held: RefCell<Option<File>>,
}

impl BusyWait {
    /// Makes `conn`, a writer of the ledger at `path`, wait up to `busy_ms` for a lock, trying
    /// every [`STEP`], in turn with the other writers. The returned box must outlive the
    /// connection (the ledger keeps it in a field dropped after it).
    pub(crate) fn install(
        conn: &Connection,
        path: &Path,
        busy_ms: u64,
    ) -> rusqlite::Result<Box<BusyWait>> {
        let wait = Box::new(BusyWait {
            limit: Duration::from_millis(busy_ms),
            since: Cell::new(None),
            turnstile: turnstile(path),
            beginning: Cell::new(false),
            held: RefCell::new(None),
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

    /// Before a write transaction begins: passes the turnstile when there is one. False when
    /// the wait for it ran out (the ledger is busy).
    pub(crate) fn enter(&self) -> bool {
        self.beginning.set(true);
        self.since.set(Some(Instant::now()));
        match OpenOptions::new().read(true).open(&self.turnstile) {
            Ok(file) => self.take(file),
            Err(_) => true,
        }
    }

    /// Once the write transaction has begun (or failed to): gives the turnstile back.
    pub(crate) fn leave(&self) {
        self.beginning.set(false);
        self.since.set(None);
        self.held.borrow_mut().take();
    }

    /// Waits for `turnstile`'s lock until this wait's limit: whether it was taken.
    fn take(&self, turnstile: File) -> bool {
        let since = self.since.get().unwrap_or_else(Instant::now);
        while !try_lock(&turnstile) {
            if since.elapsed() >= self.limit {
                return false;
            }
            std::thread::sleep(STEP);
        }
        *self.held.borrow_mut() = Some(turnstile);
        true
    }

    /// The lock is taken as a write transaction begins: holds the turnstile (making it the
    /// first time) while waiting for it. False when the wait ran out.
    fn wait_in_turn(&self) -> bool {
        if !self.beginning.get() || self.held.borrow().is_some() {
            return true;
        }
        let made = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .open(&self.turnstile);
        match made {
            Ok(file) => self.take(file),
            // A folder this writer cannot add to: it waits without a turn, as before.
            Err(_) => true,
        }
    }
}

/// SQLite's busy callback: `count` tries so far in this wait; non-zero to try again.
extern "C" fn on_busy(arg: *mut c_void, count: c_int) -> c_int {
    // SAFETY: `arg` is the BusyWait installed with this handler, alive while its connection is.
    let wait = unsafe { &*(arg as *const BusyWait) };
    let now = Instant::now();
    let since = match wait.since.get() {
        Some(t) if count > 0 || wait.beginning.get() => t,
        _ => {
            wait.since.set(Some(now));
            now
        }
    };
    if now.duration_since(since) >= wait.limit || !wait.wait_in_turn() {
        return 0;
    }
    std::thread::sleep(STEP);
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer waits its whole limit, no more, for a lock another connection keeps, and
    /// leaves the turnstile free when it gives up.
    #[test]
    fn a_writer_waits_its_limit_for_a_held_lock() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.db");
        let holder = Connection::open(&path).unwrap();
        holder
            .execute_batch("PRAGMA journal_mode=WAL; CREATE TABLE t(x); BEGIN IMMEDIATE")
            .unwrap();
        let waiter = Connection::open(&path).unwrap();
        let wait = BusyWait::install(&waiter, &path, 150).unwrap();
        for _ in 0..2 {
            let t = Instant::now();
            assert!(wait.enter());
            let r = waiter.execute_batch("BEGIN IMMEDIATE");
            wait.leave();
            let took = t.elapsed();
            assert!(r.is_err(), "the lock is held");
            assert!(took >= Duration::from_millis(150), "{took:?}");
        }
        assert!(
            turnstile(&path).exists(),
            "a writer that waited made the turnstile"
        );
        let free = File::open(turnstile(&path)).unwrap();
        assert!(try_lock(&free), "given back");
        drop(free);
        holder.execute_batch("COMMIT").unwrap();
        assert!(wait.enter());
        waiter.execute_batch("BEGIN IMMEDIATE; COMMIT").unwrap();
        wait.leave();
    }

    /// The starvation of issue 44: one writer commits back to back, holding the lock 5 ms a
    /// transaction and taking it again at once; another, which needs the lock five times, gets
    /// it each time within a 300 ms wait (polling alone, every millisecond, it had only the
    /// microseconds between two transactions to land in, and mostly lost).
    #[test]
    fn a_waiting_writer_gets_its_turn_between_back_to_back_commits() {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        use std::sync::Arc;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.db");
        Connection::open(&path)
            .unwrap()
            .execute_batch("PRAGMA journal_mode=WAL; CREATE TABLE t(x)")
            .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let commits = Arc::new(AtomicU64::new(0));
        let (p, s, c) = (path.clone(), Arc::clone(&stop), Arc::clone(&commits));
        let looper = std::thread::spawn(move || {
            let conn = Connection::open(&p).unwrap();
            let wait = BusyWait::install(&conn, &p, 10_000).unwrap();
            while !s.load(Ordering::Relaxed) {
                assert!(wait.enter());
                let begun = conn.execute_batch("BEGIN IMMEDIATE");
                wait.leave();
                begun.unwrap();
                conn.execute_batch("INSERT INTO t VALUES (1)").unwrap();
                std::thread::sleep(Duration::from_millis(5));
                conn.execute_batch("COMMIT").unwrap();
                c.fetch_add(1, Ordering::Relaxed);
            }
        });
        while commits.load(Ordering::Relaxed) < 20 {
            std::thread::sleep(Duration::from_millis(5));
        }
        let conn = Connection::open(&path).unwrap();
        let wait = BusyWait::install(&conn, &path, 300).unwrap();
        let mut got = 0;
        for _ in 0..5 {
            assert!(wait.enter());
            let begun = conn.execute_batch("BEGIN IMMEDIATE; INSERT INTO t VALUES (2); COMMIT");
            wait.leave();
            got += usize::from(begun.is_ok());
        }
        stop.store(true, Ordering::Relaxed);
        looper.join().unwrap();
        assert_eq!(got, 5, "the waiting writer got the lock every time");
    }

    /// A writer that comes for the lock while another holds the turnstile waits for it.
    #[test]
    fn a_writer_waits_at_a_held_turnstile() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.db");
        let conn = Connection::open(&path).unwrap();
        let wait = BusyWait::install(&conn, &path, 100).unwrap();
        let t = File::create(turnstile(&path)).unwrap();
        assert!(try_lock(&t));
        let start = Instant::now();
        assert!(!wait.enter(), "the turnstile is held past the limit");
        wait.leave();
        assert!(start.elapsed() >= Duration::from_millis(100));
        drop(t);
        assert!(wait.enter());
        wait.leave();
    }
}
