//! The SQLite backend: the only SQL on a ledger file — opening ledgers, appending (one
//! `BEGIN IMMEDIATE` transaction that reads the head and inserts), the write policy, scans,
//! verbatim import, the derived indexes kept beside the events (full text, Merkle tree,
//! vectors, projection checkpoints) and migrations of our own `pmm_` tables (SPEC §2.1, §2.5).
//! A host's cache of a PostgreSQL ledger is a file of this kind too, wrapped above this
//! backend (`store::replica`), which knows nothing of it.
//!
//! The `events` table and its indices are the reference's, so either implementation can open
//! the other's file. Our own tables are caches, never authoritative, and are created by an
//! append-only list of migrations keyed on `PRAGMA user_version`.

mod batch;
mod busy;
mod cached;
mod checkpoint;
mod derived;
pub(crate) mod erase;
mod erasing;
mod fresh;
mod fts;
mod integrity;
mod merkle;
mod open;
mod path;
mod reads;
mod schema;
mod traits;
pub mod vectors;

pub use batch::Batch;
pub(crate) use cached::Cached;
pub use cached::{CACHED_BYTES, CACHED_EVENTS};
pub use derived::{Derived, Have, DERIVED};
pub use erasing::Erased;
pub use fresh::Fresh;
pub use integrity::sqlite_check;
pub use merkle::Tree;
pub use open::without_memory_statistics;
pub use path::{not_a_path, not_regular, parse_db};
pub use reads::{rows_read, TextIndex};
pub(crate) use reads::{Reads, ReadsThrough};

pub use fts::{RECALLED_KINDS, TOKENIZER};

pub use checkpoint::{save_projection_checkpoint, save_reader_checkpoint};

/// The testing aid's variable that pauses an erasure before its commit.
pub fn erase_pause_env() -> &'static str {
    erase::PAUSE_ENV
}
pub use crate::event::erasure::erased_id;
pub use crate::store::log::{Filter, Head};
pub use erase::{quote_needles, MIN_QUOTE_CHARS, QUOTE_CHARS, QUOTING_KINDS};

use crate::event::Kind;
use crate::{Error, Result};
use rusqlite::{params, Connection, ErrorCode, OptionalExtension, TransactionBehavior};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

// Named by the modules beside these (derived parts, vectors, checkpoints) as `super::…`.
use open::MIGRATIONS;
use path::companions_forbidden;
use reads::text;

/// Default busy timeout: how long a writer waits for another writer's lock.
pub const DEFAULT_BUSY_TIMEOUT_MS: u64 = 5_000;

/// The default ledger path, relative to the current directory (as the reference's CLI).
pub const DEFAULT_DB: &str = ".data/pmmdb/pmm.db";

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
    /// A writer's wait for the lock ([`busy`]): after `conn`, so that it outlives it.
    busy: Option<Box<busy::BusyWait>>,
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
            busy: None,
        }
    }

    /// Makes this file a host's cache of a server's ledger (`store::replica`). Freed bytes
    /// are zeroed from now on (`secure_delete`): a cache erases a text it caught up the
    /// erasure of, and no stale copy of it may stay in a freed cell or page.
    pub(crate) fn serve_as_cache(&mut self) -> Result<()> {
        self.conn
            .pragma_update(None, "secure_delete", "ON")
            .map_err(|e| self.err(e))?;
        // The server holds the events durably: a cache commit lost to a power cut is read
        // back by the next catch-up, so its commits need no fsync of their own (WAL keeps the
        // file whole; an erasure's commit is synced by its checkpoint, `truncate_cache_wal`).
        self.conn
            .pragma_update(None, "synchronous", "NORMAL")
            .map_err(|e| self.err(e))
    }

    /// Opened `immutable`, as the file is at rest (`read_mode`): it does not see writes made
    /// after it was opened, so a reader kept between calls must not be one.
    pub fn is_at_rest(&self) -> bool {
        self.at_rest
    }

    /// Lets SQLite keep up to `kib` KiB of pages in memory for this connection (SQLite's
    /// default is 2 MiB): for a reader that comes back to the same pages (reads by id).
    pub fn set_page_cache(&self, kib: u32) -> Result<()> {
        self.conn
            .pragma_update(None, "cache_size", -i64::from(kib))
            .map_err(|e| self.err(e))
    }

    /// Reads up to the first `bytes` of the file through SQLite's memory-mapped I/O
    /// (`PRAGMA mmap_size`): a page is then read where the OS keeps it, shared by every
    /// connection and process that reads the file, instead of being copied into this
    /// connection's page cache; pages past `bytes`, and those still in the WAL, are read as
    /// before. Only for a read-only connection: SQLite maps the file read-only and checks the
    /// map against the file's size at each read transaction, and pmm never shrinks a ledger
    /// file (no `VACUUM`, no `auto_vacuum`: erasure zeroes text in place).
    pub fn map_pages(&self, bytes: u64) -> Result<()> {
        let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
        self.conn
            .pragma_update(None, "mmap_size", bytes)
            .map_err(|e| self.err(e))
    }

    /// How many bytes of the file this connection reads through memory-mapped I/O
    /// ([`Ledger::map_pages`]; 0: none).
    pub fn mapped_bytes(&self) -> Result<u64> {
        let n: i64 = self
            .conn
            .query_row("PRAGMA mmap_size", [], |r| r.get(0))
            .map_err(|e| self.err(e))?;
        Ok(n.max(0) as u64)
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
        batch.rebuild(parts)?;
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
        batch.catch_up_index(progress)?;
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
    Error::store(SqliteError(e))
}

/// A SQLite error as the store's ([`Error::Store`]): it reads "database error: …", its source
/// the driver's error.
#[derive(Debug, thiserror::Error)]
#[error("database error: {0}")]
pub struct SqliteError(#[source] rusqlite::Error);

impl crate::error::DatabaseError for SqliteError {
    fn backend(&self) -> &'static str {
        "sqlite"
    }
}

/// A SQLite error met where no ledger path is known to name (`?` in the backend's code).
impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Error {
        Error::store(SqliteError(e))
    }
}

pub use crate::error::Violation;

#[cfg(test)]
impl Ledger {
    /// Tests of the store: one event in a transaction of its own, without the write
    /// session's checks (programs write through [`crate::session`]).
    pub(crate) fn append_unchecked(
        &mut self,
        ev: &crate::event::NewEvent,
        clock: &crate::event::Clock,
    ) -> Result<crate::event::Event> {
        crate::store::log::Writer::append_one(self, ev, &clock.ts())
    }

    /// Tests that build a ledger's rows directly (faster than appends, or damaged on purpose).
    pub(crate) fn conn_for_tests(&self) -> &Connection {
        &self.conn
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Map;

    /// A SQLite error is the store's error with the driver's boxed inside: it reads as it
    /// always has ("database error: …", the driver's error as its source) and exits 2.
    #[test]
    fn a_sqlite_error_is_the_stores_and_reads_as_before() {
        let raw = || rusqlite::Error::InvalidQuery;
        let e = Error::from(raw());
        assert!(matches!(&e, Error::Store(s) if s.backend() == "sqlite"));
        assert_eq!(e.to_string(), format!("database error: {}", raw()));
        let source = std::error::Error::source(&e).map(ToString::to_string);
        assert_eq!(source, Some(raw().to_string()));
        assert_eq!(crate::error::ExitStatus::exit_code(&e), 2);
    }

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
        let kinds = [Kind::UserMessage, Kind::AssistantMessage];
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
        crate::session::erase(&mut w, &[1], false, "a card number", "owner", &clock).unwrap();
        assert!(r
            .text_index(10)
            .unwrap()
            .term_hits("4111", 9, 9)
            .unwrap()
            .is_empty());
        assert_eq!(temp_tables(&r), 0, "and dropped with its text");
    }
}
