//! What a connection knows of its file's schema ([`Schema`]): the type and name of every
//! object in `main.sqlite_master`, `PRAGMA user_version` and the columns the backend asks
//! about (the `events` table's, whether the vectors are keyed, whether the packs have their
//! magnitude bits), read in one statement and kept with the connection, so that opening,
//! every write transaction and every search ask it instead of the file.
//!
//! The snapshot is read again only when the schema may have changed: before each use the
//! two header cookies are read (`PRAGMA schema_version`, which every schema change bumps,
//! this connection's own included, and `PRAGMA user_version`, which the migrations set), no
//! table is scanned, and a snapshot read at other cookies is stale. Only a snapshot of the
//! committed schema is kept: one read inside this connection's write transaction, after a
//! change of its own that may yet be rolled back (a derived part restored, the hash index
//! dropped), serves that use alone, and the next use reads again until the commit
//! ([`at_begin`] says that a write transaction has changed nothing yet).
//!
//! The snapshot lives in the connection itself (SQLite's client data, freed when it closes),
//! so every function that is handed a connection — the ledger's, a write transaction's, a
//! search's helper, a test's — finds that connection's snapshot without being handed it.

use rusqlite::{ffi, Connection};
use std::cell::{Cell, RefCell};
use std::os::raw::c_void;
use std::sync::Arc;

/// The schema of a connection's main database as of its cookies.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Schema {
    /// `(type, name)` of every object in `main.sqlite_master`.
    objects: Vec<(String, String)>,
    /// `(table, column)` of the tables whose columns the backend asks about.
    columns: Vec<(String, String)>,
    /// `(schema_version, user_version)` when it was read.
    cookies: (i64, i64),
}

/// One statement reads it all: the objects, then the columns of the tables that were laid
/// out differently over time (or by another program: `events`).
const READ: &str = "
SELECT type, name, NULL FROM main.sqlite_master
UNION ALL SELECT 'column', 'events', name FROM pragma_table_info('events', 'main')
UNION ALL SELECT 'column', 'pmm_vectors', name FROM pragma_table_info('pmm_vectors', 'main')
UNION ALL SELECT 'column', 'pmm_vector_pack', name FROM pragma_table_info('pmm_vector_pack', 'main')";

/// The header's two cookies (no table is read).
const COOKIES: &str = "SELECT (SELECT schema_version FROM pragma_schema_version),
    (SELECT user_version FROM pragma_user_version)";

impl Schema {
    /// Reads it from `conn` (`cookies`: read before it, so that a change in between makes
    /// the snapshot stale rather than wrong).
    fn read(conn: &Connection, cookies: (i64, i64)) -> rusqlite::Result<Schema> {
        let mut schema = Schema {
            objects: Vec::new(),
            columns: Vec::new(),
            cookies,
        };
        let mut stmt = conn.prepare(READ)?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            let (kind, name) = (
                r.get::<_, Option<String>>(0)?,
                r.get::<_, Option<String>>(1)?,
            );
            let (Some(kind), Some(name)) = (kind, name) else {
                continue;
            };
            match r.get::<_, Option<String>>(2)? {
                Some(column) if kind == "column" => schema.columns.push((name, column)),
                Some(_) => {}
                None => schema.objects.push((kind, name)),
            }
        }
        Ok(schema)
    }

    /// Whether the main schema has an object (table, index, view or trigger) called `name`.
    pub(crate) fn has(&self, name: &str) -> bool {
        self.objects.iter().any(|(_, n)| n == name)
    }

    /// Whether it has a table called `name`.
    pub(crate) fn has_table(&self, name: &str) -> bool {
        self.objects.iter().any(|(t, n)| t == "table" && n == name)
    }

    /// Whether it has an index called `name`.
    pub(crate) fn has_index(&self, name: &str) -> bool {
        self.objects.iter().any(|(t, n)| t == "index" && n == name)
    }

    /// Whether it has any table besides SQLite's own (`name NOT LIKE 'sqlite_%'`).
    pub(crate) fn has_user_tables(&self) -> bool {
        let sqlites =
            |n: &str| n.get(..6).is_some_and(|p| p.eq_ignore_ascii_case("sqlite")) && n.len() > 6;
        self.objects
            .iter()
            .any(|(t, n)| t == "table" && !sqlites(n))
    }

    /// The names of its objects.
    #[cfg(test)]
    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.objects.iter().map(|(_, n)| n.as_str())
    }

    /// `PRAGMA user_version`: how many of our migrations the file has had.
    pub(crate) fn version(&self) -> i64 {
        self.cookies.1
    }

    /// The columns of the `events` table (none without one).
    pub(crate) fn events_columns(&self) -> impl Iterator<Item = &str> {
        self.columns_of("events")
    }

    /// Whether the vectors are keyed by one integer (`pmm_vectors.key`, migration 5).
    pub(crate) fn vectors_keyed(&self) -> bool {
        self.columns_of("pmm_vectors").any(|c| c == "key")
    }

    /// Whether the vector packs have their magnitude bits (`pmm_vector_pack.mags`,
    /// migration 6).
    pub(crate) fn pack_has_mags(&self) -> bool {
        self.columns_of("pmm_vector_pack").any(|c| c == "mags")
    }

    fn columns_of<'s>(&'s self, table: &'s str) -> impl Iterator<Item = &'s str> {
        self.columns
            .iter()
            .filter(move |(t, _)| t == table)
            .map(|(_, c)| c.as_str())
    }
}

/// What is kept with a connection.
#[derive(Default)]
struct Slot {
    /// The snapshot of the committed schema last read.
    kept: RefCell<Option<Arc<Schema>>>,
    /// How many times the schema was read on this connection.
    reads: Cell<u64>,
}

/// The client data's name.
const SLOT: &std::ffi::CStr = c"pmm_schema";

/// `conn`'s slot, made the first time (`None` only when SQLite had no memory for it).
fn slot(conn: &Connection) -> Option<&Slot> {
    // SAFETY: the handle is `conn`'s own and open while it is borrowed. The client data under
    // SLOT is only ever a `Box<Slot>` set here, freed by SQLite (`free_slot`) when the
    // connection closes, which needs the connection by value: the reference cannot outlive
    // it. A connection is used by one thread at a time (`Connection` is not `Sync`), so the
    // slot's cells are too; a failed set has already freed the box.
    unsafe {
        let db = conn.handle();
        let found = ffi::sqlite3_get_clientdata(db, SLOT.as_ptr()) as *const Slot;
        if !found.is_null() {
            return Some(&*found);
        }
        let made = Box::into_raw(Box::<Slot>::default());
        let rc = ffi::sqlite3_set_clientdata(db, SLOT.as_ptr(), made.cast(), Some(free_slot));
        (rc == ffi::SQLITE_OK).then(|| &*made)
    }
}

/// Frees a slot as its connection closes.
unsafe extern "C" fn free_slot(p: *mut c_void) {
    // SAFETY: `p` is the `Box<Slot>` that `slot` gave SQLite, freed once.
    drop(unsafe { Box::from_raw(p as *mut Slot) });
}

/// Whether `conn` is inside a write transaction (which may have changed the schema).
fn writing(conn: &Connection) -> bool {
    // SAFETY: the handle is `conn`'s own and open; the name is a C string.
    unsafe { ffi::sqlite3_txn_state(conn.handle(), c"main".as_ptr()) == ffi::SQLITE_TXN_WRITE }
}

/// The schema as `conn` sees it now.
pub(crate) fn of(conn: &Connection) -> rusqlite::Result<Arc<Schema>> {
    current(conn, false)
}

/// The schema as `conn` sees it at the start of a write transaction, before the
/// transaction changed anything: what it reads is the committed schema, and is kept.
pub(crate) fn at_begin(conn: &Connection) -> rusqlite::Result<Arc<Schema>> {
    current(conn, true)
}

fn current(conn: &Connection, committed: bool) -> rusqlite::Result<Arc<Schema>> {
    let cookies = conn
        .prepare_cached(COOKIES)?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let slot = slot(conn);
    let kept = slot.and_then(|s| s.kept.borrow().clone());
    if let Some(kept) = kept.filter(|k| k.cookies == cookies) {
        return Ok(kept);
    }
    let fresh = Arc::new(Schema::read(conn, cookies)?);
    if let Some(slot) = slot {
        slot.reads.set(slot.reads.get() + 1);
        if committed || !writing(conn) {
            *slot.kept.borrow_mut() = Some(fresh.clone());
        }
    }
    Ok(fresh)
}

/// How many times `conn` has read its schema.
#[cfg(test)]
pub(crate) fn reads(conn: &Connection) -> u64 {
    slot(conn).map_or(0, |s| s.reads.get())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Clock, Kind, NewEvent};
    use crate::store::sqlite::Ledger;
    use serde_json::Map;

    fn append(l: &mut Ledger, clock: &Clock, text: &str) {
        let ev = NewEvent::new(Kind::UserMessage, text.to_string(), Map::new()).unwrap();
        l.append_unchecked(&ev, clock).unwrap();
    }

    /// Many write transactions and reads on one connection read the schema once: every
    /// append after the first finds it kept.
    #[test]
    fn the_schema_is_read_once_for_many_transactions() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = Ledger::open_writer(&dir.path().join("l.db"), 1000).unwrap();
        let clock = Clock::pinned("2025-11-24T05:55:41Z").unwrap();
        append(&mut l, &clock, "first");
        let before = reads(l.conn_for_tests());
        for i in 0..50 {
            append(&mut l, &clock, &format!("event {i}"));
            l.have(crate::store::sqlite::Derived::Vectors).unwrap();
            l.lag(crate::store::sqlite::Derived::Text).unwrap();
        }
        assert_eq!(
            reads(l.conn_for_tests()),
            before,
            "no read after the first append"
        );
        assert!(
            before <= 4,
            "opening and the first append read it {before} times"
        );
    }

    /// Another connection's table, or its new `user_version`, is seen at the next use: the
    /// schema is read again then, and once only.
    #[test]
    fn another_connections_change_is_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.db");
        let mut l = Ledger::open_writer(&path, 1000).unwrap();
        let clock = Clock::pinned("2025-11-24T05:55:41Z").unwrap();
        append(&mut l, &clock, "first");
        let conn = l.conn_for_tests();
        let at = |conn: &Connection| {
            let s = of(conn).unwrap();
            (reads(conn), s)
        };
        let (n, s) = at(conn);
        assert!(!s.has_table("other"));
        let other = Connection::open(&path).unwrap();
        other.execute_batch("CREATE TABLE other (x)").unwrap();
        let (m, s) = at(conn);
        assert_eq!((m, s.has_table("other")), (n + 1, true));
        let version = s.version();
        other
            .pragma_update(None, "user_version", version + 1)
            .unwrap();
        let (k, s) = at(conn);
        assert_eq!((k, s.version()), (m + 1, version + 1));
        assert_eq!(at(conn).0, k, "and kept after");
        append(&mut l, &clock, "second");
        assert_eq!(reads(l.conn_for_tests()), k);
    }

    /// A change of the connection's own inside a write transaction is seen in it, and not
    /// kept past a rollback.
    #[test]
    fn an_own_change_rolled_back_is_not_kept() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE events (id)").unwrap();
        assert!(of(&conn).unwrap().has_table("events"));
        conn.execute_batch("BEGIN IMMEDIATE; CREATE TABLE mine (x)")
            .unwrap();
        assert!(of(&conn).unwrap().has_table("mine"));
        conn.execute_batch("ROLLBACK").unwrap();
        assert!(!of(&conn).unwrap().has_table("mine"));
        conn.execute_batch("CREATE TABLE yours (x)").unwrap();
        let s = of(&conn).unwrap();
        assert!(s.has_table("yours") && !s.has_table("mine"));
        assert_eq!(s.events_columns().collect::<Vec<_>>(), ["id"]);
    }
}
