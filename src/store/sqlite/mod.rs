//! The SQLite backend: the only SQL on a ledger file — opening ledgers, appending (one
//! `BEGIN IMMEDIATE` transaction that reads the head and inserts), the write policy, scans,
//! verbatim import, the derived indexes kept beside the events (full text, Merkle tree,
//! vectors, projection checkpoints) and migrations of our own `pmm_` tables (SPEC §2.1, §2.5).
//! A PostgreSQL ledger's host cache is a file of this kind too ([`super::replica`]).
//!
//! The `events` table and its indices are the reference's, so either implementation can open
//! the other's file. Our own tables are caches, never authoritative, and are created by an
//! append-only list of migrations keyed on `PRAGMA user_version`.

mod busy;
mod cached;
mod checkpoint;
mod derived;
pub(crate) mod erase;
mod fresh;
mod fts;
mod merkle;
mod traits;
pub mod vectors;

pub(crate) use cached::Cached;
pub use cached::{CACHED_BYTES, CACHED_EVENTS};
pub use derived::{Derived, Have, DERIVED};
pub use fresh::Fresh;
pub use merkle::Tree;

pub use fts::{RECALLED_KINDS, TOKENIZER};

pub use checkpoint::{
    catch_up, project, save_projection_checkpoint, save_reader_checkpoint, Projected, CHECKPOINT,
    CHECKPOINT_EVERY, CHECKPOINT_FORMAT,
};

/// The testing aid's variable that pauses an erasure before its commit.
pub fn erase_pause_env() -> &'static str {
    erase::PAUSE_ENV
}
pub use erase::{erased_id, quote_needles, MIN_QUOTE_CHARS, QUOTE_CHARS, QUOTING_KINDS};

use super::{log, notices, postgres, replica};
use crate::event::{Clock, Event, Kind};
use crate::{Error, Result};
use rusqlite::types::ValueRef;
use rusqlite::{params, Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

/// Default busy timeout: how long a writer waits for another writer's lock.
pub const DEFAULT_BUSY_TIMEOUT_MS: u64 = 5_000;

/// The default ledger path, relative to the current directory (as the reference's CLI).
pub const DEFAULT_DB: &str = ".data/pmmdb/pmm.db";

const SCHEMA: &str = "
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
const MIGRATIONS: &[&str] = &[
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
type MigrationCode = fn(&Connection) -> rusqlite::Result<()>;

/// Migrations that need code after their SQL: `(number, what runs)`.
const MIGRATED_IN_CODE: &[(usize, MigrationCode)] = &[(6, vectors::repack)];

/// The event columns in [`row_to_event`]'s order (a macro, so that constant queries can be
/// put together with `concat!`).
macro_rules! columns {
    () => {
        "id, ts, kind, content, meta, prev_hash, hash"
    };
}
const COLUMNS: &str = columns!();
/// One event by id ([`Reads::get`]): a constant, not formatted per call.
const GET_BY_ID: &str = concat!("SELECT ", columns!(), " FROM events WHERE id = ?1");

/// The newest event's id and hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// Its id.
    pub id: i64,
    /// Its stored hash.
    pub hash: Option<String>,
}

/// Which events a scan returns.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only ids ≥ this.
    pub since: Option<i64>,
    /// Only ids ≤ this.
    pub until: Option<i64>,
    /// Only these kinds (all when empty).
    pub kinds: Vec<String>,
}

/// An open ledger.
pub struct Ledger {
    conn: Connection,
    path: PathBuf,
    busy_ms: u64,
    /// The derived parts this connection's writes leave behind ([`Ledger::defer`]).
    deferred: Vec<Derived>,
    /// Inside [`Ledger::in_snapshot`]'s read transaction (a vector search may still use a
    /// helper connection: there is no write of this one's that it would not see).
    reading: std::sync::atomic::AtomicBool,
    /// Opened `immutable`, at rest ([`read_mode`]): no helper connection beside it.
    at_rest: bool,
    /// Vector packs kept in memory between searches ([`Ledger::keep_vector_packs`]).
    packs: Option<std::sync::Arc<std::sync::Mutex<vectors::PackCache>>>,
    /// The helper connection of the last vector search, kept for the next when the packs are
    /// (its page cache keeps the vectors' index pages).
    spare: std::sync::Mutex<Option<Connection>>,
    /// The PostgreSQL server whose events this file caches ([`replica`]), and its URL as
    /// shown (password left out).
    upstream: Option<(replica::Upstream, String, String)>,
    /// A writer's wait for the lock ([`busy`]): after `conn`, so that it outlives it.
    busy: Option<Box<busy::BusyWait>>,
}

fn text(v: ValueRef<'_>) -> Option<String> {
    match v {
        ValueRef::Null => None,
        ValueRef::Integer(i) => Some(i.to_string()),
        ValueRef::Real(f) => Some(f.to_string()),
        // Valid UTF-8 (everything we write) takes the fast check; anything else is kept
        // readable rather than refused.
        ValueRef::Text(b) | ValueRef::Blob(b) => Some(match std::str::from_utf8(b) {
            Ok(t) => t.to_owned(),
            Err(_) => String::from_utf8_lossy(b).into_owned(),
        }),
    }
}

/// Events read from SQLite by this process so far (see [`rows_read`]).
static ROWS_READ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many event rows this process has read from ledgers: the measure behind "a turn reads a
/// bounded number of events, not the ledger" (checkpoints, heads and counts are not rows).
pub fn rows_read() -> u64 {
    ROWS_READ.load(std::sync::atomic::Ordering::Relaxed)
}

fn row_to_event(row: &rusqlite::Row<'_>) -> rusqlite::Result<Event> {
    ROWS_READ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(Event {
        id: row.get(0)?,
        ts: text(row.get_ref(1)?).unwrap_or_default(),
        kind: text(row.get_ref(2)?).unwrap_or_default().into(),
        content: text(row.get_ref(3)?).unwrap_or_default(),
        meta: text(row.get_ref(4)?).unwrap_or_default(),
        prev_hash: text(row.get_ref(5)?),
        hash: text(row.get_ref(6)?),
    })
}

impl Ledger {
    /// A ledger on `conn`, as every constructor makes it.
    fn with_conn(conn: Connection, path: &Path, busy_ms: u64) -> Ledger {
        Ledger {
            conn,
            path: path.into(),
            busy_ms,
            deferred: Vec::new(),
            at_rest: false,
            reading: Default::default(),
            packs: None,
            spare: Default::default(),
            upstream: None,
            busy: None,
        }
    }

    /// Makes this (cache) file the local copy of the PostgreSQL ledger at `url`. Freed bytes
    /// are zeroed from now on (`secure_delete`): a cache erases a text it caught up the
    /// erasure of, and no stale copy of it may stay in a freed cell or page.
    pub(crate) fn attach(&mut self, up: replica::Upstream, url: &str) -> Result<()> {
        self.conn
            .pragma_update(None, "secure_delete", "ON")
            .map_err(|e| self.err(e))?;
        self.upstream = Some((up, postgres::url::shown(url), url.to_string()));
        Ok(())
    }

    /// The PostgreSQL ledger this file caches, as shown (no password), if it is one.
    pub fn url(&self) -> Option<&str> {
        self.upstream.as_ref().map(|(_, u, _)| u.as_str())
    }

    /// Where this ledger's events are read from as stored: the file, or the PostgreSQL URL as
    /// given (for a check that must see the server's rows, not this host's cache of them).
    pub fn source(&self) -> PathBuf {
        match &self.upstream {
            Some((_, _, url)) => PathBuf::from(url),
            None => self.path.clone(),
        }
    }

    /// Catches a cached PostgreSQL ledger up with its server (a no-op on a SQLite ledger): a
    /// long-lived reader calls it before it answers again. How many events were new.
    pub fn refresh(&mut self) -> Result<u64> {
        if self.upstream.is_none() {
            return Ok(0);
        }
        let before = self.max_id()?;
        // Catching up writes only to the cache: no need to lock the server's head. A server
        // that closed the connection meanwhile (a restart) is connected to again, once.
        if let Err(e) = self.begin_with(false).and_then(Batch::commit) {
            let revived = match &mut self.upstream {
                Some((up, _, _)) => up.log.revive()?,
                None => false,
            };
            if !revived {
                return Err(e);
            }
            self.begin_with(false)?.commit()?;
        }
        Ok((self.max_id()? - before).max(0) as u64)
    }

    /// Opens (creating file and folders if needed) a ledger for writing: WAL, busy timeout,
    /// schema, migrations.
    pub fn open_writer(path: &Path, busy_ms: u64) -> Result<Ledger> {
        if let Some(url) = postgres_url(path) {
            return replica::open(url, true, busy_ms);
        }
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

    fn init_writer(&mut self) -> rusqlite::Result<()> {
        self.busy = Some(busy::BusyWait::install(
            &self.conn,
            &self.path,
            self.busy_ms,
        )?);
        // Every writer zeroes what it frees: a row moved by a page split, not only an erased
        // one, would otherwise leave a copy of its text in the file's free space, which an
        // erasure later cannot reach.
        self.conn.pragma_update(None, "secure_delete", "ON")?;
        let has_tables: bool = self.conn.query_row(
            "SELECT EXISTS(SELECT 1 FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%')",
            [],
            |r| r.get(0),
        )?;
        let has_events = self.has_events_table()?;
        if has_tables && !has_events {
            return Err(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_NOTADB),
                Some("a SQLite database without an events table".into()),
            ));
        }
        // Another program's `events` table is refused before anything in the file changes
        // (the switch to WAL below is kept in the file).
        if has_events {
            if let Some(why) = foreign_events(&self.conn)? {
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
    fn switch_to_wal(&self) -> rusqlite::Result<()> {
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
    fn create_schema(&mut self, has_events: bool) -> rusqlite::Result<()> {
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
    fn create_unjournaled(path: &Path, busy_ms: u64) -> Result<Ledger> {
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
    fn finish_unjournaled(self) -> Result<()> {
        self.switch_to_wal().map_err(|e| self.err(e))?;
        let path = self.path.clone();
        self.conn
            .close()
            .map_err(|(_, e)| map_err(e, &path, DEFAULT_BUSY_TIMEOUT_MS))
    }

    fn has_events_table(&self) -> rusqlite::Result<bool> {
        self.conn.query_row(
            "SELECT EXISTS(SELECT 1 FROM sqlite_master WHERE type='table' AND name='events')",
            [],
            |r| r.get(0),
        )
    }

    fn migrate(&mut self) -> rusqlite::Result<()> {
        let version = |c: &Connection| -> rusqlite::Result<usize> {
            c.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0))
                .map(|v| v.max(0) as usize)
        };
        if version(&self.conn)? >= MIGRATIONS.len() {
            return Ok(());
        }
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let from = version(&tx)?;
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
        postgres::refuse_url(path)?;
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        if Path::new(&wal).exists() || !path.is_file() {
            return Ledger::open_reader(path);
        }
        Ledger::open_at_rest(path)
    }

    /// Opens `path` read-only and `immutable`: the file as it is at rest, nothing made or
    /// locked beside it ([`read_mode`]).
    fn open_at_rest(path: &Path) -> Result<Ledger> {
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

    /// Lets SQLite keep up to `kib` KiB of pages in memory for this connection (SQLite's
    /// default is 2 MiB): for a reader that comes back to the same pages (reads by id).
    pub fn set_page_cache(&self, kib: u32) -> Result<()> {
        self.conn
            .pragma_update(None, "cache_size", -i64::from(kib))
            .map_err(|e| self.err(e))
    }

    /// Keeps the vector packs of the model searched in `packs` between searches, for a
    /// process that searches many times (turns read from stdin, `pmm-recall --lines`,
    /// `pmm-mcp`, which shares one cache between the ledgers it opens): a search then reads
    /// only the pack rows that changed since the last ([`vectors::PackCache`]).
    pub fn keep_vector_packs(
        &mut self,
        packs: std::sync::Arc<std::sync::Mutex<vectors::PackCache>>,
    ) {
        self.packs = Some(packs);
    }

    /// Runs `f` inside one read transaction: every read of `f` sees the same snapshot, and
    /// SQLite takes its lock once instead of once per statement (many small reads in a row).
    pub fn in_snapshot<T>(&self, f: impl FnOnce(&Ledger) -> crate::Result<T>) -> crate::Result<T> {
        self.conn
            .execute_batch("BEGIN DEFERRED")
            .map_err(|e| self.err(e))?;
        self.reading.store(true, Ordering::Relaxed);
        let out = f(self);
        self.reading.store(false, Ordering::Relaxed);
        let end = self.conn.execute_batch("COMMIT").map_err(|e| self.err(e));
        let out = out?;
        end?;
        Ok(out)
    }

    /// Opens an existing ledger read-only. Never creates a file.
    pub fn open_reader(path: &Path) -> Result<Ledger> {
        if let Some(url) = postgres_url(path) {
            return replica::open(url, false, DEFAULT_BUSY_TIMEOUT_MS);
        }
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
        if let Some(why) = foreign_events(&ledger.conn).map_err(|e| ledger.err(e))? {
            return Err(Error::NotALedger {
                path: path.into(),
                why,
            });
        }
        Ok(ledger)
    }

    /// The file this ledger lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stores a projection checkpoint for event `event_id` (with that event's hash, so a later
    /// reader can tell whether it still matches), keeping only the newest `keep` of that name.
    pub fn save_checkpoint(
        &mut self,
        name: &str,
        format: i64,
        event_id: i64,
        state: &[u8],
        keep: usize,
    ) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| map_err(e, &self.path, self.busy_ms))?;
        let result = (|| {
            let hash: Option<String> = tx
                .query_row("SELECT hash FROM events WHERE id = ?1", [event_id], |r| {
                    r.get(0)
                })
                .optional()?
                .flatten();
            let Some(hash) = hash else { return Ok(()) };
            // A state projected before an erasure that came after its event may hold the
            // erased text (another process erased it, or a host's cache caught the erasure
            // up, after this one projected): it is not kept, or the text would come back in
            // what is projected from it.
            let erased_after: i64 = tx.query_row(
                "SELECT coalesce(max(id), 0) FROM events WHERE kind = ?1",
                [Kind::Erasure.as_str()],
                |r| r.get(0),
            )?;
            if erased_after > event_id {
                return Ok(());
            }
            tx.execute(
                "INSERT OR REPLACE INTO pmm_checkpoints (name, event_id, event_hash, format, state) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![name, event_id, hash, format, state],
            )?;
            tx.execute(
                "DELETE FROM pmm_checkpoints WHERE name = ?1 AND event_id NOT IN
                 (SELECT event_id FROM pmm_checkpoints WHERE name = ?1 ORDER BY event_id DESC LIMIT ?2)",
                params![name, keep as i64],
            )?;
            Ok(())
        })();
        match result {
            Ok(()) => tx
                .commit()
                .map_err(|e| map_err(e, &self.path, self.busy_ms)),
            Err(e) => Err(map_err(e, &self.path, self.busy_ms)),
        }
    }

    /// A database error met through this ledger (e.g. by the Merkle tree's reads,
    /// [`Ledger::tree`]) as the library's error, naming the ledger.
    pub fn err(&self, e: rusqlite::Error) -> Error {
        Reads::err(self, e)
    }

    /// Starts a write transaction (`BEGIN IMMEDIATE`: the head cannot move under it).
    pub fn begin(&mut self) -> Result<Batch<'_>> {
        self.begin_with(true)
    }

    /// [`Ledger::begin`]; on a cached PostgreSQL ledger, `lock` says whether the server's head
    /// row is locked for appends (a catch-up alone does not lock it, and appends nothing).
    fn begin_with(&mut self, lock: bool) -> Result<Batch<'_>> {
        let busy_ms = self.busy_ms;
        let path = self.path.clone();
        // A cached PostgreSQL ledger: the server's head row is locked first (always in this
        // order, so two writers on one host cannot wait on each other).
        let (lease, server_head) = match &mut self.upstream {
            Some((up, _, _)) => {
                up.log.revive()?;
                let (lease, head) = replica::Lease::take(up, lock)?;
                (Some(lease), head)
            }
            None => (None, None),
        };
        // Writers take turns for the lock ([`busy`]): past the turnstile, then the lock.
        if let Some(b) = &self.busy {
            if !b.enter() {
                b.leave();
                return Err(Error::Busy(busy_ms));
            }
        }
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate);
        if let Some(b) = &self.busy {
            b.leave();
        }
        let tx = tx.map_err(|e| map_err(e, &path, busy_ms))?;
        let head = head(&tx).map_err(|e| map_err(e, &path, busy_ms))?;
        if let Some(why) =
            unsafe_head(&tx, head.as_ref()).map_err(|e| map_err(e, &path, busy_ms))?
        {
            return Err(Error::Damaged { path, why });
        }
        // The derived parts, walked as one list: a part that lost a table (or its state) is
        // made whole again here, and every part writes keep is caught up at the commit.
        let schema = derived::Schema::read(&tx).map_err(|e| map_err(e, &path, busy_ms))?;
        let mut keep = Vec::new();
        for d in DERIVED {
            if self.deferred.contains(&d) {
                continue;
            }
            let have = d
                .have_in(&tx, &schema)
                .map_err(|e| map_err(e, &path, busy_ms))?;
            if have != Have::Whole {
                d.restore(&tx).map_err(|e| map_err(e, &path, busy_ms))?;
            }
            if d.kept_by_writes() {
                keep.push(d);
            }
        }
        let mut batch = Batch {
            tx,
            head,
            keep,
            path,
            busy_ms,
            scratch: Vec::with_capacity(1024),
            lease: None,
            pulled: 0,
            vectors_put: Default::default(),
            scrubbed: false,
        };
        if let Some(lease) = lease {
            replica::pull(&mut batch, lease.log())?;
            let at = batch.head.as_ref().map_or(0, |h| h.id);
            if lease.locks() && server_head.as_ref().map_or(0, |h| h.id) != at {
                return Err(Error::Damaged {
                    path: lease.log().url().into(),
                    why: format!(
                        "the head row says {} but the events end at {at}; nothing was written",
                        server_head.map_or(0, |h| h.id)
                    ),
                });
            }
            batch.pulled = at;
            batch.lease = Some(lease);
        }
        Ok(batch)
    }

    /// Leaves derived part `d` behind for this connection's writes (`pmm-append --no-index`
    /// for a bulk import defers the full-text index; the benchmark that prices the Merkle
    /// tree defers it): the next writer that keeps it restores it if need be and brings it up
    /// to date, in its own transaction. Never wrong, only later.
    pub fn defer(&mut self, d: Derived) {
        if !self.deferred.contains(&d) {
            self.deferred.push(d);
        }
    }

    /// The Merkle tree over the ledger as it is now: the stored nodes, and in memory whatever
    /// the stored tree lags behind (a reader never writes).
    pub fn tree(&self) -> Result<Tree<'_>> {
        Tree::open(&self.conn).map_err(|e| self.err(e))
    }

    /// How many events derived part `d` is behind the head: `None` for a part writes do not
    /// keep up to date or that the ledger never had, every event for a broken one.
    pub fn lag(&self, d: Derived) -> Result<Option<u64>> {
        let head = self.max_id()?;
        d.lag(&self.conn, head).map_err(|e| self.err(e))
    }

    /// What the ledger holds of derived part `d`.
    pub fn have(&self, d: Derived) -> Result<Have> {
        d.have(&self.conn).map_err(|e| self.err(e))
    }

    /// Rebuilds derived parts `parts` from the ledger in one write transaction (`pmm-recall
    /// --reindex` rebuilds them all, `pmm-verify --rebuild-tree` the tree), making again
    /// whatever of them is missing (`Derived::rebuild`).
    pub fn rebuild(&mut self, parts: &[Derived]) -> Result<()> {
        let batch = self.begin()?;
        let head = batch.head.as_ref().map_or(0, |h| h.id);
        for d in parts {
            d.rebuild(&batch.tx, head).map_err(|e| batch.err(e))?;
        }
        batch.commit()
    }

    /// Whether the ledger has our projection-checkpoint table.
    pub fn has_checkpoint_table(&self) -> Result<bool> {
        Derived::Checkpoints
            .whole(&self.conn)
            .map_err(|e| self.err(e))
    }

    /// Brings the full-text index up to the head in one write transaction, `step` events at
    /// a time, calling `progress(done, total)` (for the bar a writer shows the first time it
    /// opens an older ledger). Writes do this on their own at every commit; this only lets
    /// the long first build be seen.
    pub fn catch_up_index(&mut self, progress: &mut dyn FnMut(u64, u64)) -> Result<()> {
        let batch = self.begin()?;
        let head = batch.head.as_ref().map_or(0, |h| h.id);
        fts::catch_up(&batch.tx, head, 20_000, progress).map_err(|e| batch.err(e))?;
        batch.commit()
    }

    /// Rebuilds every derived part from the ledger (`pmm-recall --reindex`): how many
    /// events of the recalled kinds the full-text index now holds.
    pub fn reindex(&mut self) -> Result<u64> {
        self.rebuild(&DERIVED)?;
        self.recallable_count_any()
    }

    /// Stores vectors of model `name` (`dim` dimensions) in one write transaction of their
    /// own (made before it begins: a model never holds the write lock); events that have one
    /// keep it. Returns how many were new. A model whose stored vectors have other dimensions
    /// is refused (exit 2): two vector spaces never share a name.
    pub fn put_vectors(&mut self, name: &str, dim: usize, v: &[(i64, Vec<f32>)]) -> Result<usize> {
        let batch = self.begin()?;
        let n = batch.put_vectors(name, dim, v)?;
        batch.commit()?;
        Ok(n)
    }

    /// Opens a ledger to check its derived tables: read-write (FTS5's integrity check is
    /// issued as an `INSERT` command, though it writes nothing), without migrations or a
    /// journal-mode change, so the file is left as it was. Refused (saying why) where this
    /// user may not make the `-wal` and `-shm` files (`companions_forbidden`).
    pub fn open_for_check(path: &Path) -> Result<Ledger> {
        if let Some(url) = postgres_url(path) {
            // The cache is this host's own file: its indexes can be checked in place.
            return replica::open(url, false, DEFAULT_BUSY_TIMEOUT_MS);
        }
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
    fn open_plain(path: &Path, flags: OpenFlags) -> Result<Ledger> {
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

    /// Checks every derived part against the ledger (`pmm-recall --check`, on a ledger from
    /// [`Ledger::open_for_check`]): the findings, empty when they all match (the full-text
    /// index covers exactly up to the head, and FTS5's own integrity check finds every event's
    /// tokens in it and nothing else; the Merkle tree covers the head and its last leaf is that
    /// event's; each vector model's packs hold as many vectors as it has; no table of any part
    /// is missing).
    pub fn check_derived(&self) -> Result<Vec<String>> {
        let head = self.max_id()?;
        let mut findings = Vec::new();
        for d in DERIVED {
            findings.extend(d.check(&self.conn, head).map_err(|e| self.err(e))?);
        }
        Ok(findings)
    }

    /// Erases events `ids` (`pmm-append --erase`): in one write transaction, an `erasure`
    /// event per id (naming it, its hash, its kind and `reason`, written by `actor`) and the
    /// event's content and meta removed from its row and from every derived table; then the
    /// WAL is checkpointed and truncated. Bad ids, erasure events and events already erased
    /// are refused (exit 2) before anything is written. `refuse` is the write session's policy
    /// check, run inside the transaction once the targets are known: an error it returns is
    /// committed with whatever it appended (a `violation`) and returned, and nothing is erased.
    /// With `with_quotes`, the later events that quote an erased text ([`Ledger::quoting`])
    /// are erased too, looked for inside the transaction: one appended by another process (or
    /// caught up from the server) just before it is not missed.
    pub fn erase(
        &mut self,
        ids: &[i64],
        with_quotes: bool,
        reason: &str,
        actor: &str,
        clock: &Clock,
        refuse: &mut dyn FnMut(&mut Batch<'_>) -> Result<Option<Error>>,
    ) -> Result<Erased> {
        self.conn
            .pragma_update(None, "secure_delete", "ON")
            .map_err(|e| self.err(e))?;
        let mut batch = self.begin()?;
        let mut ids = ids.to_vec();
        if with_quotes {
            for id in ids.clone() {
                if let Some(ev) = batch.get(id)? {
                    ids.extend(
                        erase::quoting(&batch.tx, id, &ev.content).map_err(|e| batch.err(e))?,
                    );
                }
            }
            ids.sort_unstable();
            ids.dedup();
        }
        let targets = ids
            .iter()
            .map(|&id| batch.erasable(id))
            .collect::<Result<Vec<_>>>()?;
        if let Some(e) = refuse(&mut batch)? {
            batch.commit()?;
            return Err(e);
        }
        let mut events = Vec::with_capacity(targets.len());
        for target in &targets {
            events.push(batch.erase(target, reason, actor, clock, None)?);
        }
        erase::compact_index(&batch.tx).map_err(|e| batch.err(e))?;
        erase::test_pause();
        batch.commit()?;
        let wal_truncated = erase::truncate_wal(&self.conn).map_err(|e| self.err(e))?;
        Ok(Erased {
            events,
            erased: ids,
            wal_truncated,
        })
    }

    /// The events after `id` whose content or meta quote `content` (event `id`'s text): the
    /// summaries, lifetime-memory chunks and reflections an erasure should take along
    /// (`--with-quotes`). Texts shorter than [`MIN_QUOTE_CHARS`] are not looked for.
    pub fn quoting(&self, id: i64, content: &str) -> Result<Vec<i64>> {
        erase::quoting(&self.conn, id, content).map_err(|e| self.err(e))
    }

    /// [`Ledger::quoting`] for many events at once, in one pass over the later events of
    /// the quoting kinds and `embedding_add` (`targets`: `(id, content)`): quoted id → the
    /// ids that quote it, in id order; events quoted by none are left out.
    pub fn quoting_many(
        &self,
        targets: &[(i64, String)],
    ) -> Result<std::collections::BTreeMap<i64, Vec<i64>>> {
        erase::quoting_many(&self.conn, targets).map_err(|e| self.err(e))
    }

    /// Checkpoints the WAL into the file and truncates it (after a write transaction that
    /// erased: the erased text may sit in its frames); `false` when a reader kept part of it.
    pub fn truncate_wal(&self) -> Result<bool> {
        erase::truncate_wal(&self.conn).map_err(|e| self.err(e))
    }

    /// The `erasure` event that names event `id`, if it was erased.
    pub fn erased_by(&self, id: i64) -> Result<Option<i64>> {
        erase::erased_by(&self.conn, id).map_err(|e| self.err(e))
    }
}

/// Reading events, the same on a [`Ledger`] and inside a write transaction ([`Batch`]: it
/// sees the ledger as the transaction does, its own appends included).
pub(crate) trait Reads {
    /// The connection to read through.
    fn conn(&self) -> &Connection;
    /// Maps a SQLite error for this ledger.
    fn err(&self, e: rusqlite::Error) -> Error;
    /// A second read-only connection for a vector search to split its work over, when the
    /// machine has a second core (none inside a transaction, whose view another connection
    /// would not share).
    fn helper(&self) -> Option<Connection> {
        None
    }

    /// The vector packs this process keeps in memory, if it does ([`Ledger::keep_vector_packs`]).
    fn vector_packs(&self) -> Option<&std::sync::Mutex<vectors::PackCache>> {
        None
    }

    /// Takes back a helper connection after a search, to hand out again (or drops it).
    fn return_helper(&self, _helper: Connection) {}

    /// The newest event, if any.
    fn head(&self) -> Result<Option<Head>> {
        head(self.conn()).map_err(|e| self.err(e))
    }

    /// The highest id (0 when empty) — the reference's `count()`.
    fn max_id(&self) -> Result<i64> {
        Ok(self.head()?.map_or(0, |h| h.id))
    }

    /// One event by id.
    fn get(&self, id: i64) -> Result<Option<Event>> {
        // Cached: recall's fill, the turn and --deep's prompt check read many events by id.
        self.conn()
            .prepare_cached(GET_BY_ID)
            .and_then(|mut stmt| stmt.query_row([id], row_to_event).optional())
            .map_err(|e| self.err(e))
    }

    /// [`Reads::get`], shared: a reader that keeps the events it read ([`Cached`]) hands out
    /// its copy instead of a new one.
    fn get_shared(&self, id: i64) -> Result<Option<std::sync::Arc<Event>>> {
        Ok(self.get(id)?.map(std::sync::Arc::new))
    }

    /// An event of this ledger the caller read another way (`pmm-verify --deep`'s prompt
    /// check is handed the walk's): a reader that keeps the events it read ([`Cached`]) keeps
    /// this one too, for later reads by id; others let it go.
    fn remember(&self, _event: std::sync::Arc<Event>) {}

    /// The id of the event whose hash is `hash` (an index lookup).
    fn id_of_hash(&self, hash: &str) -> Result<Option<i64>> {
        self.conn()
            .query_row("SELECT id FROM events WHERE hash = ?1", [hash], |r| {
                r.get(0)
            })
            .optional()
            .map_err(|e| self.err(e))
    }

    /// The id of the newest `erasure` event (0 when there is none): an index look-up. What a
    /// process that keeps anything derived from the ledger's text between reads (projections,
    /// events read by id, vector packs, a temporary full-text index) compares with the value
    /// it saw last, to drop what it kept when an erasure came in between (an erasure blanks a
    /// row without changing the chain's hashes, so nothing else tells).
    fn last_erasure(&self) -> Result<i64> {
        self.conn()
            .prepare_cached("SELECT coalesce(max(id), 0) FROM events WHERE kind = ?1")
            .and_then(|mut s| s.query_row([Kind::Erasure.as_str()], |r| r.get(0)))
            .map_err(|e| self.err(e))
    }

    /// How many events of `kind` have an id above `after` (an index range count).
    fn count_kind_after(&self, kind: Kind, after: i64) -> Result<u64> {
        self.conn()
            .query_row(
                "SELECT COUNT(*) FROM events WHERE kind = ?1 AND id > ?2",
                params![kind.as_str(), after],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n.max(0) as u64)
            .map_err(|e| self.err(e))
    }

    /// The newest event of `kind` whose content contains `needle` (through the kind index,
    /// then a scan of that kind's rows: meant for rare look-ups such as an old autonomy slot).
    fn find_kind_containing(&self, kind: Kind, needle: &str) -> Result<Option<i64>> {
        self.conn()
            .query_row(
                "SELECT id FROM events WHERE kind = ?1 AND instr(content, ?2) > 0 ORDER BY id DESC LIMIT 1",
                params![kind.as_str(), needle],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    /// The stored vector model called `name` (`None`: no vector of it yet).
    fn vector_model(&self, name: &str) -> Result<Option<vectors::Model>> {
        vectors::model(self.conn(), name).map_err(|e| self.err(e))
    }

    /// The events whose vectors of model `name` are nearest to `query` among those before
    /// `before`: `(id, cosine)`, best first, at most `k` (empty without vectors of `name`).
    fn vector_search(
        &self,
        name: &str,
        query: &[f32],
        before: i64,
        k: usize,
    ) -> Result<Vec<(i64, f64)>> {
        match self.vector_model(name)? {
            Some(m) => {
                if let Some(packs) = self.vector_packs() {
                    let mark = self.last_erasure()?;
                    packs
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .forget_if_erased(mark);
                }
                let mut helper = self.helper();
                let reading = vectors::Reading {
                    conn: self.conn(),
                    helper: helper.as_mut(),
                    packs: self.vector_packs(),
                };
                let found = vectors::search(reading, m, query, before, k, vectors::LIMITS)
                    .map_err(|e| self.err(e));
                if let Some(h) = helper {
                    self.return_helper(h);
                }
                found
            }
            None => Ok(Vec::new()),
        }
    }

    /// Every vector model of the ledger: `(name, dimensions, vectors)`, by name.
    fn vector_models(&self) -> Result<Vec<(String, usize, u64)>> {
        vectors::models(self.conn()).map_err(|e| self.err(e))
    }

    /// Recallable events after `after` without a vector of model `name` (all of them when
    /// the model has none yet): `(id, content)` in id order, at most `limit`.
    fn missing_vectors(&self, name: &str, after: i64, limit: usize) -> Result<Vec<(i64, String)>> {
        let m = self
            .vector_model(name)?
            .unwrap_or(vectors::Model { mid: -1, dim: 0 });
        vectors::missing(self.conn(), m, after, limit).map_err(|e| self.err(e))
    }

    /// How many recallable events have no vector of model `name`.
    fn missing_vector_count(&self, name: &str) -> Result<u64> {
        let m = self
            .vector_model(name)?
            .unwrap_or(vectors::Model { mid: -1, dim: 0 });
        if !vectors::has_tables(self.conn()).map_err(|e| self.err(e))? {
            return self.recallable_count_any();
        }
        vectors::missing_count(self.conn(), m).map_err(|e| self.err(e))
    }

    /// The stored vectors of model `name` (quantized: [`vectors::quantize`]), oldest event
    /// first, at most `limit`.
    fn stored_vectors(&self, name: &str, limit: usize) -> Result<Vec<(i64, Vec<u8>)>> {
        match self.vector_model(name)? {
            Some(m) => vectors::stored(self.conn(), m, limit).map_err(|e| self.err(e)),
            None => Ok(Vec::new()),
        }
    }

    /// How many events of the recalled kinds the ledger holds (without the index's view).
    fn recallable_count_any(&self) -> Result<u64> {
        self.conn()
            .query_row(
                &format!(
                    "SELECT count(*) FROM events WHERE kind IN ({})",
                    fts::kinds_sql()
                ),
                [],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n.max(0) as u64)
            .map_err(|e| self.err(e))
    }

    /// Whether the ledger holds a `config` event that sets a write policy.
    fn has_policy_config(&self) -> Result<bool> {
        self.conn()
            .query_row(
                "SELECT EXISTS(SELECT 1 FROM events WHERE kind = ?1 AND content LIKE '%\"policy\"%')",
                [Kind::Config.as_str()],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))
    }

    /// The newest events of `kind`, newest first, at most `limit`.
    fn last_of_kind(&self, kind: Kind, limit: usize) -> Result<Vec<Event>> {
        let mut stmt = self
            .conn()
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM events WHERE kind = ?1 ORDER BY id DESC LIMIT ?2"
            ))
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![kind.as_str(), limit as i64], row_to_event)
            .map_err(|e| self.err(e))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| self.err(e))
    }

    /// Calls `each` with the id and content of every event of `kind`, newest first (through
    /// the kind index), until it returns `false`. A content that is not text reads as empty.
    fn newest_of_kind(&self, kind: Kind, each: &mut dyn FnMut(i64, &str) -> bool) -> Result<()> {
        let mut stmt = self
            .conn()
            .prepare_cached("SELECT id, content FROM events WHERE kind = ?1 ORDER BY id DESC")
            .map_err(|e| self.err(e))?;
        let mut rows = stmt.query([kind.as_str()]).map_err(|e| self.err(e))?;
        while let Some(row) = rows.next().map_err(|e| self.err(e))? {
            let id: i64 = row.get(0).map_err(|e| self.err(e))?;
            let content = match row.get_ref(1).map_err(|e| self.err(e))? {
                ValueRef::Text(b) => String::from_utf8_lossy(b),
                _ => std::borrow::Cow::Borrowed(""),
            };
            if !each(id, &content) {
                break;
            }
        }
        Ok(())
    }

    /// Calls `f` for every event that passes `filter`, in id order. `f` returns `false` to stop.
    fn scan<F>(&self, filter: &Filter, mut f: F) -> Result<()>
    where
        F: FnMut(Event) -> Result<bool>,
    {
        let mut sql = format!("SELECT {COLUMNS} FROM events WHERE id >= ?1 AND id <= ?2");
        if !filter.kinds.is_empty() {
            let marks: Vec<String> = (0..filter.kinds.len())
                .map(|i| format!("?{}", i + 3))
                .collect();
            sql.push_str(&format!(" AND kind IN ({})", marks.join(",")));
        }
        sql.push_str(" ORDER BY id");
        let mut stmt = self.conn().prepare_cached(&sql).map_err(|e| self.err(e))?;
        let mut args: Vec<rusqlite::types::Value> = vec![
            filter.since.unwrap_or(i64::MIN).into(),
            filter.until.unwrap_or(i64::MAX).into(),
        ];
        args.extend(filter.kinds.iter().map(|k| k.clone().into()));
        let mut rows = stmt
            .query(rusqlite::params_from_iter(args))
            .map_err(|e| self.err(e))?;
        while let Some(row) = rows.next().map_err(|e| self.err(e))? {
            let ev = row_to_event(row).map_err(|e| self.err(e))?;
            if !f(ev)? {
                break;
            }
        }
        Ok(())
    }

    /// The last `n` events that pass `filter`, oldest first.
    fn tail(&self, filter: &Filter, n: usize) -> Result<Vec<Event>> {
        let mut sql = format!("SELECT {COLUMNS} FROM events WHERE id >= ?1 AND id <= ?2");
        if !filter.kinds.is_empty() {
            let marks: Vec<String> = (0..filter.kinds.len())
                .map(|i| format!("?{}", i + 4))
                .collect();
            sql.push_str(&format!(" AND kind IN ({})", marks.join(",")));
        }
        sql.push_str(" ORDER BY id DESC LIMIT ?3");
        let mut stmt = self.conn().prepare_cached(&sql).map_err(|e| self.err(e))?;
        let mut args: Vec<rusqlite::types::Value> = vec![
            filter.since.unwrap_or(i64::MIN).into(),
            filter.until.unwrap_or(i64::MAX).into(),
            (n.min(i64::MAX as usize) as i64).into(),
        ];
        args.extend(filter.kinds.iter().map(|k| k.clone().into()));
        let rows = stmt
            .query_map(rusqlite::params_from_iter(args), row_to_event)
            .map_err(|e| self.err(e))?;
        let mut events = rows
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| self.err(e))?;
        events.reverse();
        Ok(events)
    }

    /// Up to `n` events of `kinds` next to event `id` (before it, newest first, or after it,
    /// oldest first), looking at most `window` ids away: a hit's neighbouring messages.
    fn adjacent(
        &self,
        id: i64,
        kinds: &[&str],
        n: usize,
        forward: bool,
        window: i64,
    ) -> Result<Vec<Event>> {
        let marks: Vec<String> = (0..kinds.len()).map(|i| format!("?{}", i + 4)).collect();
        // `+kind`: walk the id range, never the kind index (a kind has half the ledger). Asking
        // the kind index for each kind's nearest ids instead was no faster where messages are
        // 3 % of the events and 45 % slower where they are all of them (docs/recall.md).
        let (range, order) = if forward {
            ("id > ?1 AND id <= ?1 + ?2", "ASC")
        } else {
            ("id < ?1 AND id >= ?1 - ?2", "DESC")
        };
        let sql = format!(
            "SELECT {COLUMNS} FROM events WHERE {range} AND +kind IN ({}) ORDER BY id {order} LIMIT ?3",
            marks.join(",")
        );
        let mut stmt = self.conn().prepare_cached(&sql).map_err(|e| self.err(e))?;
        let mut args: Vec<rusqlite::types::Value> =
            vec![id.into(), window.into(), (n as i64).into()];
        args.extend(kinds.iter().map(|k| k.to_string().into()));
        let rows = stmt
            .query_map(rusqlite::params_from_iter(args), row_to_event)
            .map_err(|e| self.err(e))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| self.err(e))
    }

    /// Opens the full-text index for searching. A ledger whose index is current is searched
    /// as it is; one without an index, or whose index lags behind events another program
    /// appended, gets the missing events indexed in a temporary table of this connection
    /// (never in the file) when they are at most `max_unindexed`, and otherwise an error
    /// saying how to build the index. A temporary index no longer needed is dropped (its text
    /// may be text erased since).
    fn text_index(&self, max_unindexed: u64) -> Result<TextIndex<'_>> {
        let conn = self.conn();
        let through = match fts::usable(conn).map_err(|e| self.err(e))? {
            true => fts::through(conn).map_err(|e| self.err(e))?,
            false => None,
        };
        let head = self.max_id()?;
        let after = through.unwrap_or(0);
        let lag = head.saturating_sub(after).max(0) as u64;
        if lag > max_unindexed {
            return Err(Error::IndexBehind { lag, max_unindexed });
        }
        let temp = lag > 0;
        if temp {
            fts::temp_index(conn, after, head).map_err(|e| self.err(e))?;
        } else {
            fts::drop_temp_index(conn).map_err(|e| self.err(e))?;
        }
        Ok(TextIndex {
            conn,
            main: through.is_some(),
            temp,
        })
    }

    /// The newest usable projection checkpoint named `name` at or before event `max_id`,
    /// handed to `read` as its event id and state bytes (borrowed from SQLite, so a large
    /// state is not copied on the way); `read` returning `None` counts as no checkpoint. A
    /// checkpoint whose recorded event hash no longer matches the ledger, or whose `format`
    /// is not `format`, is ignored (it is a cache, never authoritative). `None` also when the
    /// ledger has no checkpoint table (a reference ledger, or one no writer of ours has
    /// opened).
    fn load_checkpoint<T>(
        &self,
        name: &str,
        format: i64,
        max_id: i64,
        read: impl FnOnce(i64, &[u8]) -> Option<T>,
    ) -> Result<Option<(i64, T)>> {
        let has_table = Derived::Checkpoints
            .whole(self.conn())
            .map_err(|e| self.err(e))?;
        if !has_table {
            return Ok(None);
        }
        let mut stmt = self
            .conn()
            .prepare(
                "SELECT c.event_id, c.state FROM pmm_checkpoints c JOIN events e ON e.id = c.event_id
                 WHERE c.name = ?1 AND c.format = ?2 AND c.event_id <= ?3 AND e.hash = c.event_hash
                 ORDER BY c.event_id DESC LIMIT 1",
            )
            .map_err(|e| self.err(e))?;
        let mut rows = stmt
            .query(params![name, format, max_id])
            .map_err(|e| self.err(e))?;
        let Some(row) = rows.next().map_err(|e| self.err(e))? else {
            return Ok(None);
        };
        let id: i64 = row.get(0).map_err(|e| self.err(e))?;
        let bytes = row.get_ref(1).map_err(|e| self.err(e))?;
        let bytes = match bytes {
            rusqlite::types::ValueRef::Blob(b) | rusqlite::types::ValueRef::Text(b) => b,
            _ => return Ok(None),
        };
        Ok(read(id, bytes).map(|t| (id, t)))
    }
}

impl Reads for Ledger {
    fn conn(&self) -> &Connection {
        &self.conn
    }
    fn err(&self, e: rusqlite::Error) -> Error {
        map_err(e, &self.path, self.busy_ms)
    }
    /// Only beside a `-wal` file: a read-only open of a ledger at rest would create it (see
    /// [`Ledger::open_untouched`]).
    fn helper(&self) -> Option<Connection> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut wal = self.path.as_os_str().to_owned();
        wal.push("-wal");
        let writing = !self.conn.is_autocommit() && !self.reading.load(Ordering::Relaxed);
        if cores < 2 || writing || self.at_rest || !Path::new(&wal).is_file() {
            return None;
        }
        if let Some(c) = self.spare.lock().ok().and_then(|mut s| s.take()) {
            return Some(c);
        }
        let c = Connection::open_with_flags(
            sqlite_path(&self.path),
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .ok()?;
        c.busy_timeout(std::time::Duration::from_millis(self.busy_ms))
            .ok()?;
        Some(c)
    }
    fn vector_packs(&self) -> Option<&std::sync::Mutex<vectors::PackCache>> {
        self.packs.as_deref()
    }
    /// Kept when the packs are: a process that searches many times then opens one helper,
    /// whose page cache keeps the vectors' index pages between searches (its exact step's
    /// look-ups each read a page fewer).
    fn return_helper(&self, helper: Connection) {
        if self.packs.is_some() {
            if let Ok(mut spare) = self.spare.lock() {
                *spare = Some(helper);
            }
        }
    }
}

impl Reads for Batch<'_> {
    fn conn(&self) -> &Connection {
        &self.tx
    }
    fn err(&self, e: rusqlite::Error) -> Error {
        map_err(e, &self.path, self.busy_ms)
    }
}

/// The full-text index of one connection, ready for term look-ups ([`crate::store::Indexes::text_index`]).
pub struct TextIndex<'a> {
    conn: &'a Connection,
    main: bool,
    temp: bool,
}

impl TextIndex<'_> {
    /// One term's scored postings before event `before` (BM25, higher is better), at most the
    /// newest `limit` per table. `term` is one token; it is quoted, never read as FTS5 syntax.
    pub fn term_hits(&self, term: &str, before: i64, limit: usize) -> Result<Vec<(i64, f64)>> {
        let mut out = Vec::new();
        for (on, table) in [(self.main, "main.pmm_fts"), (self.temp, "temp.pmm_fts_tmp")] {
            if on {
                out.extend(
                    fts::term_hits(self.conn, table, term, before, limit).map_err(Error::Db)?,
                );
            }
        }
        Ok(out)
    }
}

fn head(conn: &Connection) -> rusqlite::Result<Option<Head>> {
    conn.query_row(
        "SELECT id, hash FROM events ORDER BY id DESC LIMIT 1",
        [],
        |r| {
            Ok(Head {
                id: r.get(0)?,
                hash: text(r.get_ref(1)?),
            })
        },
    )
    .optional()
}

/// Why appending after `head` would be unsafe, if it would: ids above it have been written
/// already (`sqlite_sequence`, which AUTOINCREMENT keeps at the highest id ever inserted, or
/// the id index, are ahead of the table), so a damaged page hides the events that hold them
/// and a new event would reuse their ids. One row lookup and one index probe per write.
fn unsafe_head(conn: &Connection, head: Option<&Head>) -> rusqlite::Result<Option<String>> {
    let head_id = head.map_or(0, |h| h.id);
    let seq: Option<i64> = conn
        .query_row(
            "SELECT seq FROM sqlite_sequence WHERE name = 'events'",
            [],
            |r| r.get(0),
        )
        .optional()
        .or_else(|e| match e {
            // A ledger written without AUTOINCREMENT has no sqlite_sequence table.
            rusqlite::Error::SqliteFailure(_, Some(ref m)) if m.contains("no such table") => {
                Ok(None)
            }
            e => Err(e),
        })?;
    if let Some(seq) = seq.filter(|&s| s > head_id) {
        return Ok(Some(format!(
            "its last readable event is {head_id} but sqlite_sequence records id {seq} as written, so appending would reuse ids"
        )));
    }
    let has_index: bool = conn.query_row(
        "SELECT EXISTS(SELECT 1 FROM sqlite_master WHERE type='index' AND name='idx_events_id_desc')",
        [],
        |r| r.get(0),
    )?;
    if has_index {
        let indexed: Option<i64> = conn
            .query_row(
                "SELECT id FROM events INDEXED BY idx_events_id_desc ORDER BY id DESC LIMIT 1",
                [],
                |r| r.get(0),
            )
            .optional()?;
        if let Some(max) = indexed.filter(|&m| m > head_id) {
            return Ok(Some(format!(
                "its last readable event is {head_id} but the id index holds id {max}, so appending would reuse ids"
            )));
        }
    }
    Ok(None)
}

/// What SQLite's own check of the file says: `PRAGMA quick_check` (page structure, record
/// formats, constraints), or with `full` `PRAGMA integrity_check` (also that every index
/// matches its table). Empty when it says `ok`; at most `limit` messages otherwise.
pub fn sqlite_check(ledger: &Ledger, full: bool, limit: u32) -> Result<Vec<String>> {
    let pragma = if full {
        "integrity_check"
    } else {
        "quick_check"
    };
    let conn = &ledger.conn;
    let mut stmt = conn
        .prepare(&format!("PRAGMA {pragma}({})", limit.max(1)))
        .map_err(|e| ledger.err(e))?;
    let rows = stmt
        .query_map([], |r| r.get::<_, String>(0))
        .map_err(|e| ledger.err(e))?;
    let mut out = Vec::new();
    for row in rows {
        let line = row.map_err(|e| ledger.err(e))?;
        if line != "ok" {
            // "*** in database main ***" heads the list; it says nothing on its own.
            out.extend(
                line.lines()
                    .filter(|l| !l.starts_with("*** "))
                    .map(str::to_string),
            );
        }
    }
    // The writers' own guard, which SQLite's check does not know about.
    let head = ledger.head()?;
    if let Some(why) = unsafe_head(conn, head.as_ref()).map_err(|e| ledger.err(e))? {
        out.push(why);
    }
    Ok(out)
}

/// How a reader opens a ledger ([`read_mode`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadMode {
    /// As SQLite does: with the `-wal` and `-shm` files, made if they are not there.
    Plain,
    /// `immutable`: the file as it is at rest, nothing made or locked beside it.
    AtRest,
}

/// `path` with `suffix` appended to its file name.
fn companion(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

/// Whether this process may write `path` (`access(2)`: root may, unless the file system is
/// read-only).
fn file_writable(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

/// Whether this process may write in `dir`.
fn dir_writable(dir: &Path) -> bool {
    file_writable(dir)
}

/// Why this process must not make the `-wal` and `-shm` files of the ledger at `path`, if it
/// must not: they would be its own, and the ledger's owner's writers could not write a `-shm`
/// that another user made, nor, in a sticky directory such as `/tmp`, remove it (SQLite gives
/// the files root makes the ledger's owner); and in a directory this process cannot write
/// they cannot be made at all.
fn companions_forbidden(path: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let owner = std::fs::metadata(path).ok()?.uid();
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    // SQLite gives the files root makes the ledger's owner.
    if owner != me && me != 0 {
        return Some(format!(
            "the ledger belongs to user {owner}, whose writers could not use -wal and -shm files that user {me} made"
        ));
    }
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !dir_writable(dir) {
        return Some(format!(
            "user {me} cannot write its directory {}, where SQLite makes the -wal and -shm files",
            dir.display()
        ));
    }
    None
}

/// How a reader opens the WAL ledger at `path` (SQLite's "WAL mode with read-only
/// databases"). A read-only connection needs the `-wal` and `-shm` files and makes them when
/// they are not there, which a reader does only where [`companions_forbidden`] allows it.
/// Elsewhere:
/// - no `-wal`: no writer has the ledger open and all of it is in the file, which is read
///   `immutable` (nothing made, nothing locked; a writer that starts during the read can make
///   it fail, and it is then run again);
/// - a `-wal` and a `-shm`: a writer has it open; SQLite reads through them (the `-shm`
///   read-only if this user cannot write it) and makes nothing;
/// - a `-wal` without a `-shm`: refused, saying why and what to do.
fn read_mode(path: &Path) -> Result<ReadMode> {
    let Some(why) = companions_forbidden(path) else {
        return Ok(ReadMode::Plain);
    };
    if !companion(path, "-wal").exists() {
        return Ok(ReadMode::AtRest);
    }
    if companion(path, "-shm").exists() {
        return Ok(ReadMode::Plain);
    }
    Err(Error::CannotRead {
        path: path.into(),
        why: format!(
            "its -wal holds writes not yet in the ledger and there is no -shm beside it, which a reader must make, but {why}: run any pmm writer on it as its owner (the writer folds the -wal into the ledger when it ends), then read again"
        ),
    })
}

/// A reader's failed open beside `-wal` and `-shm` files it may not change, said as such.
fn unreadable_companions(e: Error, path: &Path) -> Error {
    let Some(why) = companions_forbidden(path) else {
        return e;
    };
    match e {
        Error::ReadOnlyLedger(_) | Error::Io { .. } => Error::CannotRead {
            path: path.into(),
            why: format!(
                "SQLite could not read it through the -wal and -shm files beside it ({e}), and {why}: run any pmm writer on it as its owner, then read again"
            ),
        },
        e => e,
    }
}

/// Whether the ledger `--db` names exists: a file, or a PostgreSQL URL (whose server a writer
/// connects to, creating the schema if need be).
pub fn exists(db: &Path) -> bool {
    postgres_url(db).is_some() || db.exists()
}

/// How to name the ledger `db` in messages and records: its path, or its PostgreSQL URL with
/// the password (in the user part or any `password=` parameter, however encoded) as `***`.
/// Everything that shows a `--db` shows it through this.
pub fn shown(db: &Path) -> String {
    match postgres_url(db) {
        Some(url) => postgres::url::shown(url),
        None => db.display().to_string(),
    }
}

/// `path` as a PostgreSQL URL, when it is one.
fn postgres_url(path: &Path) -> Option<&str> {
    path.to_str().filter(|p| postgres::is_postgres_url(p))
}

/// Maps SQLite's errors to ours, so that users read "database is locked ..." and not a code.
/// Why a ledger's name is not a file path, or `None` when it is one: a URL (`postgres://…`,
/// which a later store will take), an SQLite URI (`file:…`, which SQLite would open as a URI
/// to writers and a path to readers), or nothing at all. A ledger is always named by a plain
/// path; a file whose name starts with `file:` is named `./file:…`.
pub fn not_a_path(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("an empty name is not a file path".into());
    }
    if name.len() >= 5 && name.as_bytes()[..5].eq_ignore_ascii_case(b"file:") {
        return Some(format!(
            "'{name}' is an SQLite URI, not a file path (a ledger is named by its file's path; ./{name} names the file)"
        ));
    }
    let scheme = name.split_once("://").map(|(s, _)| s);
    if scheme.is_some_and(|s| {
        s.starts_with(|c: char| c.is_ascii_alphabetic())
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    }) {
        return Some(format!(
            "'{name}' is a URL, not a file path (a ledger is named by its file's path)"
        ));
    }
    None
}

/// [`not_a_path`] as a typed error: the check every ledger open makes before touching the
/// file system (no folder `file:x` or `postgres:` is ever created).
fn check_path(path: &Path) -> Result<()> {
    match not_a_path(&path.to_string_lossy()) {
        Some(why) => Err(Error::NotAPath {
            path: path.into(),
            why,
        }),
        None => Ok(()),
    }
}

/// `--db` (and `$PMM_DB`): a plain file path; a URL, an SQLite URI or nothing is refused
/// (see [`not_a_path`]).
pub fn parse_db(s: &str) -> std::result::Result<PathBuf, String> {
    match not_a_path(s) {
        Some(why) => Err(why),
        None => Ok(PathBuf::from(s)),
    }
}

/// The name SQLite is given for a ledger's path: one it can only take as that file. A
/// relative `file:…` would be a URI and `:memory:` or an empty name a database that is no
/// file at all; `./` in front of a relative path rules all of them out.
fn sqlite_path(path: &Path) -> std::borrow::Cow<'_, Path> {
    if path.is_relative() {
        Path::new(".").join(path).into()
    } else {
        path.into()
    }
}

/// Why a file's `events` table is not a ledger's (another program's table of that name), or
/// `None`: it must have the ledger's seven columns.
fn foreign_events(conn: &Connection) -> rusqlite::Result<Option<String>> {
    let mut st = conn.prepare("SELECT name FROM pragma_table_info('events')")?;
    let have: Vec<String> = st
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let missing: Vec<&str> = ["id", "ts", "kind", "content", "meta", "prev_hash", "hash"]
        .into_iter()
        .filter(|c| !have.iter().any(|h| h.eq_ignore_ascii_case(c)))
        .collect();
    Ok((!missing.is_empty()).then(|| {
        format!(
            "its events table is not a ledger's (no column {})",
            missing.join(", ")
        )
    }))
}

/// A ledger is a regular file: a device (`--db` through a symlink to `/dev/null`), a pipe or
/// a socket is refused before SQLite opens it and creates `/dev/null-journal` beside it.
pub fn not_regular(path: &Path, md: &std::fs::Metadata) -> Error {
    use std::os::unix::fs::FileTypeExt;
    let t = md.file_type();
    let what = if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_fifo() {
        "a pipe"
    } else if t.is_socket() {
        "a socket"
    } else {
        "something else"
    };
    Error::NotALedger {
        path: path.into(),
        why: format!("not a regular file ({what}); a ledger is a SQLite file"),
    }
}

/// A reader of a read-only ledger leaves `-wal` and `-shm` files with the ledger's read-only
/// mode; once the ledger is writable again they would keep every writer out with "ledger is
/// read-only". Such leftovers get the ledger's mode back (changing a mode is safe while other
/// programs have the files open); when that is not allowed (another user's files), the error
/// says what to do.
fn recover_companions(path: &Path, ledger: &std::fs::Metadata) -> Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    for suffix in ["-wal", "-shm"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let p = PathBuf::from(p);
        let Ok(md) = std::fs::metadata(&p) else {
            continue;
        };
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        if md.is_file() && md.uid() != me && !file_writable(&p) {
            return Err(Error::io(
                &p,
                std::io::Error::other(format!(
                    "belongs to user {}, who read the ledger with a program that made it (an older pmm, or sqlite3), and this user cannot write it; when no program has the ledger open, remove it (as user {} or root: in a sticky directory such as /tmp only they can)",
                    md.uid(),
                    md.uid()
                )),
            ));
        }
        if !md.is_file() || !md.permissions().readonly() {
            continue;
        }
        let mode = ledger.permissions().mode() & 0o7777;
        if std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).is_err() {
            return Err(Error::io(
                &p,
                std::io::Error::other(format!(
                    "read-only, left by a reader while the ledger was read-only; make it writable (chmod u+w '{}') or, when no program has the ledger open, remove it",
                    p.display()
                )),
            ));
        }
    }
    Ok(())
}

pub(crate) fn map_err(e: rusqlite::Error, path: &Path, busy_ms: u64) -> Error {
    if let rusqlite::Error::SqliteFailure(f, ref msg) = e {
        match f.code {
            ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => return Error::Busy(busy_ms),
            ErrorCode::ReadOnly => return Error::ReadOnlyLedger(path.into()),
            ErrorCode::NotADatabase => {
                return Error::NotALedger {
                    path: path.into(),
                    why: msg
                        .clone()
                        .unwrap_or_else(|| "not a SQLite database".into()),
                }
            }
            ErrorCode::CannotOpen => {
                return Error::io(
                    path,
                    std::io::Error::other(msg.clone().unwrap_or_else(|| "cannot open".into())),
                )
            }
            _ => {}
        }
    }
    Error::Db(e)
}

pub use crate::error::Violation;

/// A cached PostgreSQL ledger's own bookkeeping: the last shared vector (by the server's
/// `seq`) the cache holds.
const REPLICA_TABLE: &str = "CREATE TABLE IF NOT EXISTS pmm_replica (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    vectors_seq INTEGER NOT NULL
)";

/// What [`Ledger::erase`] did.
#[derive(Debug, Clone)]
pub struct Erased {
    /// The `erasure` events appended, one per erased event, in id order.
    pub events: Vec<Event>,
    /// The ids erased, in order (with their quotes when asked).
    pub erased: Vec<i64>,
    /// Whether the WAL was checkpointed and truncated (`false`: a reader held part of it; the
    /// next checkpoint copies and truncates it).
    pub wal_truncated: bool,
}

/// An event about to be erased, as the transaction read it.
struct EraseTarget {
    id: i64,
    kind: Kind,
    hash: String,
    content: String,
}

/// An open write transaction. Dropping it without [`Batch::commit`] rolls everything back.
pub struct Batch<'a> {
    tx: rusqlite::Transaction<'a>,
    head: Option<Head>,
    /// The derived parts this transaction brings up to its head.
    keep: Vec<Derived>,
    path: PathBuf,
    busy_ms: u64,
    scratch: Vec<u8>,
    /// A cached PostgreSQL ledger's server, its head row locked by a writer ([`replica`]).
    lease: Option<replica::Lease<'a>>,
    /// The head the cache was caught up to: events after it are this transaction's own.
    pulled: i64,
    /// The vectors this transaction stored, `(model, dim, event ids)`, for a cached PostgreSQL
    /// ledger's server.
    vectors_put: std::cell::RefCell<Vec<(String, usize, Vec<i64>)>>,
    /// Whether an erasure caught up from the server erased a text in this transaction (the
    /// WAL is truncated after the commit).
    scrubbed: bool,
}

impl Batch<'_> {
    /// Erases the text of event `id` from the cache and its indexes, as an erasure caught up
    /// from the server says (the server's row is already erased): whether there was any.
    pub(crate) fn scrub_pulled(&mut self, id: i64) -> Result<bool> {
        let Some(ev) = self.get(id)? else {
            return Ok(false);
        };
        if ev.content.is_empty() && ev.meta == "{}" {
            return Ok(false);
        }
        erase::scrub(&self.tx, id, &ev.kind, &ev.content).map_err(|e| self.err(e))?;
        self.scrubbed = true;
        Ok(true)
    }

    /// Rewrites the full-text index without deleted tokens ([`erase::compact_index`]).
    pub(crate) fn compact_index(&self) -> Result<()> {
        erase::compact_index(&self.tx).map_err(|e| self.err(e))
    }

    /// The head as this transaction sees it.
    pub fn head(&self) -> Option<&Head> {
        self.head.as_ref()
    }

    pub(crate) fn insert(
        &mut self,
        kind: &Kind,
        content: &str,
        meta: &Map<String, Value>,
        ts: &str,
    ) -> Result<Event> {
        let ev = log::link(
            self.head.as_ref(),
            kind,
            content,
            meta,
            ts,
            &mut self.scratch,
        )?;
        self.insert_verbatim(&ev)?;
        Ok(ev)
    }

    /// Event `id` as an erasure target, or why it cannot be one (exit 2).
    fn erasable(&self, id: i64) -> Result<EraseTarget> {
        let bad = |msg: String| Error::bad_input(Some("--erase".into()), msg);
        let head = self.head.as_ref().map_or(0, |h| h.id);
        let Some(ev) = self.get(id)? else {
            return Err(bad(format!(
                "no event {id} (the ledger's ids run from 1 to {head})"
            )));
        };
        if ev.kind == Kind::Erasure {
            return Err(bad(format!(
                "event {id} is an erasure: erasures are not erased"
            )));
        }
        if let Some(by) = erase::erased_by(&self.tx, id).map_err(|e| self.err(e))? {
            return Err(bad(format!("event {id} is already erased (by event {by})")));
        }
        let Some(hash) = ev.hash.filter(|h| !h.is_empty()) else {
            return Err(bad(format!(
                "event {id} has no hash to name (run pmm-verify)"
            )));
        };
        Ok(EraseTarget {
            id,
            kind: ev.kind,
            hash,
            content: ev.content,
        })
    }

    /// Erases events inside this write transaction, as [`Ledger::erase`] does (the caller
    /// checked the policy): each `(id, extra)` gets its `erasure` event, whose meta holds
    /// `extra` besides the usual keys; then the full-text index is rewritten once. Freed pages
    /// are zeroed (`secure_delete`); the caller truncates the WAL after the commit
    /// ([`Ledger::truncate_wal`]). A retention pass of a tick writes its erasures so.
    pub fn erase_within(
        &mut self,
        ids: &[(i64, Map<String, Value>)],
        reason: &str,
        actor: &str,
        clock: &Clock,
    ) -> Result<Vec<Event>> {
        self.tx
            .pragma_update(None, "secure_delete", "ON")
            .map_err(|e| self.err(e))?;
        let mut events = Vec::with_capacity(ids.len());
        for (id, extra) in ids {
            let target = self.erasable(*id)?;
            events.push(self.erase(&target, reason, actor, clock, Some(extra))?);
        }
        if !events.is_empty() {
            erase::compact_index(&self.tx).map_err(|e| self.err(e))?;
        }
        Ok(events)
    }

    /// What one retention rule selects in this transaction (see
    /// [`crate::event::config::RetentionRule`]): the events before `before` of `kind` and by
    /// `source` (when given) older than `cutoff` that still have text, in id order, at most
    /// `limit`.
    pub fn retention_candidates(
        &self,
        before: i64,
        kind: Option<&str>,
        source: Option<&str>,
        cutoff: &str,
        limit: usize,
    ) -> Result<Vec<i64>> {
        erase::retention_candidates(&self.tx, before, kind, source, cutoff, limit)
            .map_err(|e| self.err(e))
    }

    /// Appends the `erasure` event for `t` and removes its text (see [`Ledger::erase`]).
    fn erase(
        &mut self,
        t: &EraseTarget,
        reason: &str,
        actor: &str,
        clock: &Clock,
        extra: Option<&Map<String, Value>>,
    ) -> Result<Event> {
        let named = Event {
            id: t.id,
            ts: String::new(),
            kind: t.kind.clone(),
            content: String::new(),
            meta: String::new(),
            prev_hash: None,
            hash: Some(t.hash.clone()),
        };
        let ev = crate::event::erasure::erasure(&named, reason, actor, extra);
        let event = self.insert(&ev.kind, &ev.content, &ev.meta, &clock.ts())?;
        erase::scrub(&self.tx, t.id, &t.kind, &t.content).map_err(|e| self.err(e))?;
        Ok(event)
    }

    /// Inserts an event verbatim (import): id, ts, meta text, prev_hash and hash as given.
    /// The caller has verified it.
    pub fn insert_verbatim(&mut self, ev: &Event) -> Result<()> {
        self.tx
            .prepare_cached(
                "INSERT INTO events (id, ts, kind, content, meta, prev_hash, hash) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    ev.id,
                    ev.ts,
                    ev.kind.as_str(),
                    ev.content,
                    ev.meta,
                    ev.prev_hash,
                    ev.hash
                ])
            })
            .map_err(|e| self.err(e))?;
        self.head = Some(Head {
            id: ev.id,
            hash: ev.hash.clone(),
        });
        Ok(())
    }

    /// Drops the unique index on `hash` for a bulk load into an empty ledger (the caller
    /// verifies that no hash repeats, and [`Batch::restore_hash_index`] re-creates it, sorted,
    /// before the commit, failing on a repeat): whether there was one to drop.
    pub fn defer_hash_index(&mut self) -> Result<bool> {
        let had: bool = self
            .tx
            .query_row(
                "SELECT EXISTS(SELECT 1 FROM sqlite_master WHERE type='index' AND name='idx_events_hash')",
                [],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))?;
        if had {
            self.tx
                .execute_batch("DROP INDEX idx_events_hash;")
                .map_err(|e| self.err(e))?;
        }
        Ok(had)
    }

    /// Re-creates the index [`Batch::defer_hash_index`] dropped (the reference's definition).
    pub fn restore_hash_index(&mut self) -> Result<()> {
        self.tx
            .execute_batch("CREATE UNIQUE INDEX IF NOT EXISTS idx_events_hash ON events(hash);")
            .map_err(|e| self.err(e))
    }

    /// [`Ledger::put_vectors`] inside this transaction (a turn stores its two vectors with
    /// its events).
    pub fn put_vectors(&self, name: &str, dim: usize, v: &[(i64, Vec<f32>)]) -> Result<usize> {
        let m = vectors::register(&self.tx, name, dim).map_err(|e| self.err(e))?;
        if m.dim != dim {
            return Err(Error::BadInput {
                at: None,
                msg: format!(
                    "embedding model {name} gives {dim} dimensions, but its stored vectors have {}: \
                     a different model under the same name (give it another name, or delete its vectors)",
                    m.dim
                ),
            });
        }
        // Every vector of the batch has the model's dimensions: none is dropped in silence.
        if let Some((id, odd)) = v.iter().find(|(_, x)| x.len() != dim) {
            return Err(Error::BadInput {
                at: None,
                msg: format!(
                    "embedding model {name}: the vector of event {id} has {} dimensions, not {dim}",
                    odd.len()
                ),
            });
        }
        if self.lease.is_some() {
            let ids = v.iter().map(|(id, _)| *id).collect();
            self.vectors_put
                .borrow_mut()
                .push((name.to_string(), dim, ids));
        }
        vectors::put(&self.tx, m, v).map_err(|e| self.err(e))
    }

    /// The vectors this transaction stored, as kept, for the server: `(model, dim, id, bytes)`.
    fn vectors_to_push(&self) -> Result<Vec<postgres::SharedVector>> {
        let mut out = Vec::new();
        for (name, dim, ids) in self.vectors_put.borrow().iter() {
            let Some(m) = vectors::model(&self.tx, name).map_err(|e| self.err(e))? else {
                continue;
            };
            for (id, q) in vectors::stored_of(&self.tx, m, ids).map_err(|e| self.err(e))? {
                out.push(postgres::SharedVector {
                    model: name.clone(),
                    dim: *dim,
                    id,
                    q,
                });
            }
        }
        Ok(out)
    }

    /// Stores vectors copied from the server (`(model, dim, id, bytes)`), as [`Batch::put_vectors`]
    /// would have stored them here (half floats round-trip exactly).
    pub(crate) fn put_pulled_vectors(&self, rows: &[postgres::SharedVector]) -> Result<()> {
        for postgres::SharedVector {
            model: name,
            dim,
            id,
            q,
        } in rows
        {
            let m = vectors::register(&self.tx, name, *dim).map_err(|e| self.err(e))?;
            if m.dim == *dim {
                vectors::put(&self.tx, m, &[(*id, vectors::dequantize(q))])
                    .map_err(|e| self.err(e))?;
            }
        }
        Ok(())
    }

    /// A cached PostgreSQL ledger's bookkeeping ([`replica`]): the server's `seq` of the last
    /// shared vector this cache holds (0: none yet).
    pub(crate) fn pulled_vectors_seq(&self) -> Result<i64> {
        let sql = |e: rusqlite::Error| Error::bad_input(None, format!("the host's cache: {e}"));
        self.tx.execute_batch(REPLICA_TABLE).map_err(sql)?;
        self.tx
            .query_row(
                "SELECT vectors_seq FROM pmm_replica WHERE one = 1",
                [],
                |r| r.get(0),
            )
            .optional()
            .map(|seq| seq.unwrap_or(0))
            .map_err(sql)
    }

    /// Records [`Batch::pulled_vectors_seq`].
    pub(crate) fn set_pulled_vectors_seq(&self, seq: i64) -> Result<()> {
        self.tx
            .execute(
                "INSERT INTO pmm_replica (one, vectors_seq) VALUES (1, ?1)
                 ON CONFLICT (one) DO UPDATE SET vectors_seq = excluded.vectors_seq",
                [seq],
            )
            .map(drop)
            .map_err(|e| Error::bad_input(None, format!("the host's cache: {e}")))
    }

    /// Brings the full-text index and the Merkle tree up to the events appended so far, inside
    /// this transaction. [`Batch::commit`] does it; a long import does it every so often too,
    /// so that it reads back events it wrote recently: SQLite finds a page of a large
    /// transaction's WAL by looking through the WAL's index newest part first, so reading
    /// every event back at the commit of a 10^7-event import cost time in proportion to the
    /// WAL for each page (an import grew faster than the ledger).
    pub fn catch_up(&self) -> Result<()> {
        let head = self.head.as_ref().map_or(0, |h| h.id);
        for d in &self.keep {
            d.catch_up(&self.tx, head).map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    /// Makes everything appended in this transaction durable at once, with the full-text
    /// index and the Merkle tree brought up to the new head in the same transaction.
    pub fn commit(mut self) -> Result<()> {
        self.catch_up()?;
        let (path, busy) = (self.path.clone(), self.busy_ms);
        let mut on_server = false;
        if let Some(lease) = self.lease.take() {
            // The server first: once it has committed, the events exist; a cache that then
            // fails to commit only lags, and the next catch-up reads them back.
            let mine = Filter {
                since: self.pulled.checked_add(1),
                ..Filter::default()
            };
            let vectors = self.vectors_to_push()?;
            let head = self.head.clone();
            on_server = lease.commit(
                &vectors,
                &mut |push| {
                    self.scan(&mine, |ev| {
                        push(&ev)?;
                        Ok(true)
                    })
                },
                head.as_ref(),
            )?;
        }
        let scrubbed = self.scrubbed;
        if scrubbed {
            erase::mark_erasure(&path);
        }
        match self.tx.commit().map_err(|e| map_err(e, &path, busy)) {
            // What the server committed is the truth: say the append succeeded, and that
            // this host's copy lags (the next program catches it up).
            Err(e) if on_server => {
                notices::push(format!(
                    "the events are committed on the server, but this host's cache of them could not be ({e}); it is behind, and is caught up by the next program that opens the ledger"
                ));
                Ok(())
            }
            Err(e) => Err(e),
            Ok(()) => {
                if scrubbed {
                    erase::truncate_cache_wal(&path);
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
impl Ledger {
    /// Tests of the store: one event in a transaction of its own, without the write
    /// session's checks (programs write through [`crate::session`]).
    pub(crate) fn append_unchecked(
        &mut self,
        ev: &crate::event::NewEvent,
        clock: &Clock,
    ) -> Result<Event> {
        log::Writer::append_one(self, ev, &clock.ts())
    }

    /// Tests that build a ledger's rows directly (faster than appends, or damaged on purpose).
    pub(crate) fn conn_for_tests(&self) -> &Connection {
        &self.conn
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A vector search inside a read snapshot still splits its work over a helper connection
    /// (recall runs in one), as outside any transaction; inside the ledger's own write
    /// transaction it does not (the helper would not see the transaction's writes).
    #[test]
    fn a_read_snapshot_keeps_the_search_helper_and_a_write_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = Ledger::open_writer(&dir.path().join("l.db"), 1000).unwrap();
        let clock = crate::event::Clock::pinned("2025-11-24T05:55:41Z").unwrap();
        let ev = crate::event::NewEvent::new(Kind::UserMessage, "hello".to_string(), Map::new());
        l.append_unchecked(&ev.unwrap(), &clock).unwrap();
        let outside = l.helper().is_some();
        if std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2 {
            assert!(outside, "a second core and a -wal file: a helper");
        }
        let inside = l.in_snapshot(|l| Ok(l.helper().is_some())).unwrap();
        assert_eq!(inside, outside);
        l.conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        assert!(l.helper().is_none(), "no helper inside a write transaction");
        l.conn.execute_batch("ROLLBACK").unwrap();
        assert_eq!(l.helper().is_some(), outside, "the snapshot's mark is gone");
    }

    /// The messages next to an event, before and after it within the window, are the ones a
    /// walk over the window finds, whether messages are rare or every event is one.
    #[test]
    fn adjacent_messages_are_the_nearest_in_the_window() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = Ledger::open_writer(&dir.path().join("l.db"), 1000).unwrap();
        let clock = crate::event::Clock::pinned("2025-11-24T05:55:41Z").unwrap();
        let kind = |i: i64| match i {
            ..=60 if i % 9 == 0 => Kind::UserMessage,
            ..=60 if i % 13 == 0 => Kind::AssistantMessage,
            ..=60 => Kind::TestEvent,
            _ if i % 2 == 0 => Kind::UserMessage,
            _ => Kind::AssistantMessage,
        };
        for i in 1..=120 {
            let ev = crate::event::NewEvent::new(kind(i), format!("e{i}"), Map::new()).unwrap();
            l.append_unchecked(&ev, &clock).unwrap();
        }
        let kinds = [Kind::UserMessage.as_str(), Kind::AssistantMessage.as_str()];
        let message = |i: &i64| kind(*i) != Kind::TestEvent;
        for id in [1, 5, 27, 40, 58, 61, 62, 90, 119, 120] {
            for (forward, window, n) in [(false, 64, 2), (true, 64, 2), (false, 5, 3), (true, 7, 1)]
            {
                let got: Vec<i64> = l
                    .adjacent(id, &kinds, n, forward, window)
                    .unwrap()
                    .iter()
                    .map(|e| e.id)
                    .collect();
                let want: Vec<i64> = if forward {
                    (id + 1..=(id + window).min(120))
                        .filter(message)
                        .take(n)
                        .collect()
                } else {
                    (1.max(id - window)..id)
                        .rev()
                        .filter(message)
                        .take(n)
                        .collect()
                };
                assert_eq!(got, want, "id {id} forward {forward} window {window} n {n}");
            }
        }
    }

    /// A reader's temporary full-text index must not outlive the lag it was built for: it
    /// would keep the text of an event erased since in the process's memory.
    #[test]
    fn a_temporary_index_is_dropped_once_the_ledgers_index_covers_every_event() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.db");
        let clock = crate::event::Clock::pinned("2025-11-24T05:55:41Z").unwrap();
        let mut lagging = Ledger::open_writer(&path, 1000).unwrap();
        lagging.defer(Derived::Text);
        let ev =
            crate::event::NewEvent::new(Kind::UserMessage, "my card is 4111", Map::new()).unwrap();
        lagging.append_unchecked(&ev, &clock).unwrap();
        let r = Ledger::open_reader(&path).unwrap();
        let temp_tables = |r: &Ledger| -> i64 {
            r.conn
                .query_row("SELECT count(*) FROM temp.sqlite_master", [], |r| r.get(0))
                .unwrap()
        };
        assert_eq!(
            r.text_index(10)
                .unwrap()
                .term_hits("4111", 9, 9)
                .unwrap()
                .len(),
            1
        );
        assert!(temp_tables(&r) > 0, "a temporary index was built");
        let mut w = Ledger::open_writer(&path, 1000).unwrap();
        w.erase(&[1], false, "a card number", "owner", &clock, &mut |_| {
            Ok(None)
        })
        .unwrap();
        assert!(r
            .text_index(10)
            .unwrap()
            .term_hits("4111", 9, 9)
            .unwrap()
            .is_empty());
        assert_eq!(temp_tables(&r), 0, "and dropped with its text");
    }
}
