//! Opening a ledger file: a writer (creating it, WAL, the busy wait, the schema and the
//! append-only list of migrations keyed on `PRAGMA user_version`), a reader (read-only, or
//! `immutable` at rest), a one-look reader and a checker; each refuses what is not a ledger
//! before anything in the file changes. What they ask of the file's schema (its tables, the
//! `events` columns, `user_version`) is the connection's snapshot (`schema`), read
//! once and again only after a change.

use super::path::{
    check_path, companions_forbidden, not_regular, read_mode, recover_companions, sqlite_path,
    unreadable_companions, ReadMode,
};
use super::schema::{self, Schema};
use super::{busy, fts, map_err, merkle, vectors, Ledger, DEFAULT_BUSY_TIMEOUT_MS};
use crate::{Error, Result};
use rusqlite::{Connection, OpenFlags, TransactionBehavior};
use std::path::Path;

pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts TEXT NOT NULL,
    kind TEXT NOT NULL,
    content TEXT NOT NULL,
    meta TEXT NOT NULL,
    prev_hash TEXT,
    hash TEXT
);
CREATE INDEX IF NOT EXISTS idx_events_id_desc ON events(id DESC);
CREATE INDEX IF NOT EXISTS idx_kind ON events(kind);
CREATE UNIQUE INDEX IF NOT EXISTS idx_events_hash ON events(hash);
";

/// Our own tables, one migration per entry, applied in order; `user_version` counts how many
/// have been applied. Append only: never edit an entry that has shipped.
pub(super) const MIGRATIONS: &[&str] = &[
    // 1: projection checkpoints (a cache: serialized projection state at an event, keyed by
    // the event's hash so that a checkpoint that no longer matches the ledger is ignored).
    "CREATE TABLE IF NOT EXISTS pmm_checkpoints (
        name TEXT NOT NULL,
        event_id INTEGER NOT NULL,
        event_hash TEXT NOT NULL,
        format INTEGER NOT NULL,
        state BLOB NOT NULL,
        PRIMARY KEY (name, event_id)
    );",
    // 2: the full-text index (store/sqlite/fts.rs), filled by the next write's catch-up.
    fts::MIGRATION,
    // 3: the Merkle tree's perfect-subtree hashes (store/sqlite/merkle.rs), filled by the next
    // write's catch-up.
    merkle::MIGRATION,
    // 4: sentence-embedding vectors per model (store/sqlite/vectors), filled by turns, ticks and
    // `pmm-recall --embed`.
    vectors::MIGRATION,
    // 5: the vectors keyed by one integer in a rowid table (store/sqlite/vectors: a look-up by id
    // reads one page instead of several).
    vectors::MIGRATION_KEYED,
    // 6: a magnitude bit per dimension in the vector packs; the packs are rebuilt from the
    // stored vectors ([`MIGRATED_IN_CODE`]).
    vectors::MIGRATION_MAGNITUDES,
];

/// What a migration runs after its SQL, in the same transaction.
pub(super) type MigrationCode = fn(&Connection) -> rusqlite::Result<()>;

/// Migrations that need code after their SQL: `(number, what runs)`.
pub(super) const MIGRATED_IN_CODE: &[(usize, MigrationCode)] = &[(6, vectors::repack)];

impl Ledger {
    /// Opens (creating file and folders if needed) a ledger for writing: WAL, busy timeout,
    /// schema, migrations.
    pub fn open_writer(path: &Path, busy_ms: u64) -> Result<Ledger> {
        check_path(path)?;
        if let Ok(md) = std::fs::metadata(path) {
            if md.is_dir() {
                return Err(Error::NotALedger {
                    path: path.into(),
                    why: "is a directory".into(),
                });
            }
            if !md.is_file() {
                return Err(not_regular(path, &md));
            }
            // Checked by hand: root can open a write-protected file, but a user who made the
            // ledger read-only meant it.
            if md.permissions().readonly() {
                return Err(Error::ReadOnlyLedger(path.into()));
            }
            recover_companions(path, &md)?;
        } else if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        }
        let conn = Connection::open_with_flags(
            sqlite_path(path),
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| map_err(e, path, busy_ms))?;
        let mut ledger = Ledger::with_conn(conn, path, busy_ms);
        ledger.init_writer().map_err(|e| ledger.err(e))?;
        Ok(ledger)
    }

    pub(super) fn init_writer(&mut self) -> rusqlite::Result<()> {
        self.busy = Some(busy::BusyWait::install(
            &self.conn,
            &self.path,
            self.busy_ms,
        )?);
        // Every writer zeroes what it frees: a row moved by a page split, not only an erased
        // one, would otherwise leave a copy of its text in the file's free space, which an
        // erasure later cannot reach.
        self.conn.pragma_update(None, "secure_delete", "ON")?;
        let schema = schema::of(&self.conn)?;
        let has_events = schema.has_table("events");
        if schema.has_user_tables() && !has_events {
            return Err(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_NOTADB),
                Some("a SQLite database without an events table".into()),
            ));
        }
        // Another program's `events` table is refused before anything in the file changes
        // (the switch to WAL below is kept in the file).
        if has_events {
            if let Some(why) = foreign_events(&schema) {
                return Err(rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_NOTADB),
                    Some(why),
                ));
            }
        }
        self.switch_to_wal()?;
        self.create_schema(has_events)
    }

    /// Puts the file in WAL mode (it stays so: the mode is kept in the file).
    pub(super) fn switch_to_wal(&self) -> rusqlite::Result<()> {
        let mode: String = self
            .conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
        // Readers must never block the writer: a file system that cannot hold a WAL (some
        // network file systems) is said, not silently run in another mode.
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CANTOPEN),
                Some(format!(
                    "the ledger could not be switched to WAL (its journal mode stays '{mode}'): the file system may not support it"
                )),
            ));
        }
        Ok(())
    }

    /// The reference's schema (unless the file has its `events` table) and our migrations.
    pub(super) fn create_schema(&mut self, has_events: bool) -> rusqlite::Result<()> {
        if !has_events {
            let tx = self
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)?;
            tx.execute_batch(SCHEMA)?;
            tx.commit()?;
        }
        self.migrate()
    }

    /// Creates a ledger in `path`, a new file no other process knows of ([`Fresh`]), without
    /// a journal: every page is written once, straight into the file, and a crash leaves a
    /// file nobody will read. [`Ledger::finish_unjournaled`] makes it an ordinary ledger.
    pub(super) fn create_unjournaled(path: &Path, busy_ms: u64) -> Result<Ledger> {
        let conn = Connection::open_with_flags(
            sqlite_path(path),
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| map_err(e, path, busy_ms))?;
        let mut ledger = Ledger::with_conn(conn, path, busy_ms);
        ledger
            .conn
            .execute_batch(
                "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA locking_mode=EXCLUSIVE; PRAGMA secure_delete=ON;",
            )
            .and_then(|()| ledger.create_schema(false))
            .map_err(|e| ledger.err(e))?;
        Ok(ledger)
    }

    /// Ends [`Ledger::create_unjournaled`]: the file in WAL mode like every ledger, then
    /// closed (the caller syncs it to disk).
    pub(super) fn finish_unjournaled(self) -> Result<()> {
        self.switch_to_wal().map_err(|e| self.err(e))?;
        let path = self.path.clone();
        self.conn
            .close()
            .map_err(|(_, e)| map_err(e, &path, DEFAULT_BUSY_TIMEOUT_MS))
    }

    pub(super) fn has_events_table(&self) -> rusqlite::Result<bool> {
        Ok(schema::of(&self.conn)?.has_table("events"))
    }

    pub(super) fn migrate(&mut self) -> rusqlite::Result<()> {
        let version = |s: &Schema| s.version().max(0) as usize;
        if version(&*schema::of(&self.conn)?) >= MIGRATIONS.len() {
            return Ok(());
        }
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let from = version(&*schema::at_begin(&tx)?);
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(from) {
            tx.execute_batch(sql)?;
            for (_, code) in MIGRATED_IN_CODE.iter().filter(|(n, _)| *n == i + 1) {
                code(&tx)?;
            }
            tx.pragma_update(None, "user_version", (i + 1) as i64)?;
        }
        tx.commit()
    }

    /// Opens another program's ledger for one look, leaving no trace: like
    /// [`Ledger::open_reader`], but when no writer has the file open (no `-wal` file beside
    /// it) it is opened `immutable`, because SQLite's read-only open of a WAL database at rest
    /// would otherwise create its `-wal` and `-shm` files next to it. For `REF:` targets,
    /// which a model names.
    pub fn open_untouched(path: &Path) -> Result<Ledger> {
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        if Path::new(&wal).exists() || !path.is_file() {
            return Ledger::open_reader(path);
        }
        Ledger::open_at_rest(path)
    }

    /// Opens `path` read-only and `immutable`: the file as it is at rest, nothing made or
    /// locked beside it ([`read_mode`]).
    pub(super) fn open_at_rest(path: &Path) -> Result<Ledger> {
        use std::os::unix::ffi::OsStrExt;
        let abs = std::fs::canonicalize(path).map_err(|e| Error::io(path, e))?;
        let mut uri = String::from("file:");
        for &b in abs.as_os_str().as_bytes() {
            if b.is_ascii_alphanumeric() || b"/._-~".contains(&b) {
                uri.push(b as char);
            } else {
                uri.push_str(&format!("%{b:02X}"));
            }
        }
        uri.push_str("?immutable=1");
        let conn = Connection::open_with_flags(
            &uri,
            OpenFlags::SQLITE_OPEN_READ_ONLY
                | OpenFlags::SQLITE_OPEN_URI
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| map_err(e, path, DEFAULT_BUSY_TIMEOUT_MS))?;
        let mut ledger = Ledger::with_conn(conn, path, DEFAULT_BUSY_TIMEOUT_MS);
        ledger.at_rest = true;
        if !ledger.has_events_table().map_err(|e| ledger.err(e))? {
            return Err(Error::NotALedger {
                path: path.into(),
                why: "no events table".into(),
            });
        }
        Ok(ledger)
    }

    /// Opens an existing ledger read-only. Never creates a file.
    pub fn open_reader(path: &Path) -> Result<Ledger> {
        check_path(path)?;
        match std::fs::metadata(path) {
            Err(_) => return Err(Error::MissingLedger(path.into())),
            Ok(md) if md.is_dir() => {
                return Err(Error::NotALedger {
                    path: path.into(),
                    why: "is a directory".into(),
                })
            }
            Ok(md) if !md.is_file() => return Err(not_regular(path, &md)),
            Ok(_) => {}
        }
        let ledger = match read_mode(path)? {
            ReadMode::Plain => Ledger::open_plain(path, OpenFlags::SQLITE_OPEN_READ_ONLY)
                .map_err(|e| unreadable_companions(e, path))?,
            ReadMode::AtRest => Ledger::open_at_rest(path)?,
        };
        if !ledger.has_events_table().map_err(|e| ledger.err(e))? {
            return Err(Error::NotALedger {
                path: path.into(),
                why: "no events table".into(),
            });
        }
        let schema = schema::of(&ledger.conn).map_err(|e| ledger.err(e))?;
        if let Some(why) = foreign_events(&schema) {
            return Err(Error::NotALedger {
                path: path.into(),
                why,
            });
        }
        Ok(ledger)
    }

    /// Opens a ledger to check its derived tables: read-write (FTS5's integrity check is
    /// issued as an `INSERT` command, though it writes nothing), without migrations or a
    /// journal-mode change, so the file is left as it was. Refused (saying why) where this
    /// user may not make the `-wal` and `-shm` files (`companions_forbidden`).
    pub fn open_for_check(path: &Path) -> Result<Ledger> {
        drop(Ledger::open_reader(path)?);
        if let Some(why) = companions_forbidden(path) {
            return Err(Error::CannotRead {
                path: path.into(),
                why: format!(
                    "FTS5's check of the index is a write command, and {why}: run it as the ledger's owner"
                ),
            });
        }
        Ledger::open_plain(path, OpenFlags::SQLITE_OPEN_READ_WRITE)
    }

    /// A connection to an existing file with `flags`, the default busy timeout, and nothing
    /// else: no migration, no journal-mode change.
    pub(super) fn open_plain(path: &Path, flags: OpenFlags) -> Result<Ledger> {
        let conn =
            Connection::open_with_flags(sqlite_path(path), flags | OpenFlags::SQLITE_OPEN_NO_MUTEX)
                .map_err(|e| map_err(e, path, DEFAULT_BUSY_TIMEOUT_MS))?;
        let ledger = Ledger::with_conn(conn, path, DEFAULT_BUSY_TIMEOUT_MS);
        ledger
            .conn
            .busy_timeout(std::time::Duration::from_millis(ledger.busy_ms))
            .map_err(|e| ledger.err(e))?;
        Ok(ledger)
    }
}

/// Why a file's `events` table is not a ledger's (another program's table of that name), or
/// `None`: it must have the ledger's seven columns.
pub(super) fn foreign_events(schema: &Schema) -> Option<String> {
    let missing: Vec<&str> = ["id", "ts", "kind", "content", "meta", "prev_hash", "hash"]
        .into_iter()
        .filter(|c| !schema.events_columns().any(|h| h.eq_ignore_ascii_case(c)))
        .collect();
    (!missing.is_empty()).then(|| {
        format!(
            "its events table is not a ledger's (no column {})",
            missing.join(", ")
        )
    })
}
/// Turns off SQLite's memory statistics for this process, before any connection is opened: with
/// them on (the bundled build's default) every allocation SQLite makes takes one process-wide
/// mutex to count it, which the threads of a server that reads on several connections at once
/// (`pmm-mcp --http`) would all queue on. Nothing in pmm reads those statistics. Call it first
/// thing; after SQLite has started it changes nothing (and says so with `false`).
pub fn without_memory_statistics() -> bool {
    static ONCE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ONCE.get_or_init(|| {
        // SAFETY: sqlite3_config is called with SQLITE_CONFIG_MEMSTATUS and one int, as its
        // documentation asks, and only before SQLite is initialised (it refuses otherwise).
        let rc = unsafe {
            rusqlite::ffi::sqlite3_config(
                rusqlite::ffi::SQLITE_CONFIG_MEMSTATUS,
                0 as std::os::raw::c_int,
            )
        };
        rc == rusqlite::ffi::SQLITE_OK
    })
}

#[cfg(test)]
mod tests {
    /// The bundled SQLite is built without SQLITE_ENABLE_MEMORY_MANAGEMENT
    /// (`.cargo/config.toml`): with it, every connection of a process shares one page cache
    /// behind one mutex, which a server's concurrent sessions queue on.
    #[test]
    fn connections_keep_page_caches_of_their_own() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        let mut stmt = conn.prepare("PRAGMA compile_options").unwrap();
        let options: Vec<String> = stmt
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(options.iter().any(|o| o == "THREADSAFE=1"), "{options:?}");
        assert!(
            !options.iter().any(|o| o == "ENABLE_MEMORY_MANAGEMENT"),
            "built with SQLITE_ENABLE_MEMORY_MANAGEMENT: is .cargo/config.toml's \
             LIBSQLITE3_FLAGS in effect? {options:?}"
        );
    }
}
