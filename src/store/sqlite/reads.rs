//! Reading a ledger file: the event rows, the reads every SQLite reader shares ([`Reads`],
//! the same on a [`Ledger`] and inside a write transaction, [`Batch`]) and the full-text index
//! handed to a search ([`TextIndex`]).

use super::path::sqlite_path;
use super::{fts, map_err, vectors, Batch, Derived, Filter, Head, Ledger};
use crate::event::{Event, Kind};
use crate::{Error, Result};
use rusqlite::types::ValueRef;
use rusqlite::{params, Connection, OpenFlags, OptionalExtension};
use std::path::Path;
use std::sync::atomic::Ordering;

/// The event columns in [`row_to_event`]'s order (a macro, so that constant queries can be
/// put together with `concat!`).
macro_rules! columns {
    () => {
        "id, ts, kind, content, meta, prev_hash, hash"
    };
}
pub(super) const COLUMNS: &str = columns!();
/// One event by id ([`Reads::get`]): a constant, not formatted per call.
pub(super) const GET_BY_ID: &str = concat!("SELECT ", columns!(), " FROM events WHERE id = ?1");

pub(super) fn text(v: ValueRef<'_>) -> Option<String> {
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
pub(super) static ROWS_READ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many event rows this process has read from ledgers: the measure behind "a turn reads a
/// bounded number of events, not the ledger" (checkpoints, heads and counts are not rows).
pub fn rows_read() -> u64 {
    ROWS_READ.load(std::sync::atomic::Ordering::Relaxed)
}

pub(super) fn row_to_event(row: &rusqlite::Row<'_>) -> rusqlite::Result<Event> {
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
        args.extend(filter.kinds.iter().map(|k| k.as_str().to_string().into()));
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
        args.extend(filter.kinds.iter().map(|k| k.as_str().to_string().into()));
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
        kinds: &[Kind],
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
        args.extend(kinds.iter().map(|k| k.as_str().to_string().into()));
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
            conn: Some(conn),
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

/// A reader above this backend whose reads are a SQLite reader's (the program-facing ledger
/// over a file or a host's cache, a host cache over its file): it names that reader, and
/// every read goes through it, so no code above the backend names a connection.
pub(crate) trait ReadsThrough {
    /// The SQLite reader that answers.
    type Through: Reads;
    /// That reader.
    fn reads_through(&self) -> &Self::Through;
}

impl<T: ReadsThrough> Reads for T {
    fn conn(&self) -> &Connection {
        self.reads_through().conn()
    }
    fn err(&self, e: rusqlite::Error) -> Error {
        self.reads_through().err(e)
    }
    fn helper(&self) -> Option<Connection> {
        self.reads_through().helper()
    }
    fn vector_packs(&self) -> Option<&std::sync::Mutex<vectors::PackCache>> {
        self.reads_through().vector_packs()
    }
    fn return_helper(&self, helper: Connection) {
        self.reads_through().return_helper(helper)
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
    /// `None`: an index that finds nothing ([`TextIndex::empty`]).
    conn: Option<&'a Connection>,
    main: bool,
    temp: bool,
}

impl TextIndex<'_> {
    /// An index that finds nothing: the in-memory log's, which keeps no full-text index, so
    /// that whole-ledger recall runs on it (its other sources answer).
    pub fn empty() -> TextIndex<'static> {
        TextIndex {
            conn: None,
            main: false,
            temp: false,
        }
    }

    /// One term's scored postings before event `before` (BM25, higher is better), at most the
    /// newest `limit` per table. `term` is one token; it is quoted, never read as FTS5 syntax.
    pub fn term_hits(&self, term: &str, before: i64, limit: usize) -> Result<Vec<(i64, f64)>> {
        let mut out = Vec::new();
        let Some(conn) = self.conn else {
            return Ok(out);
        };
        for (on, table) in [(self.main, "main.pmm_fts"), (self.temp, "temp.pmm_fts_tmp")] {
            if on {
                out.extend(fts::term_hits(conn, table, term, before, limit).map_err(Error::from)?);
            }
        }
        Ok(out)
    }
}

pub(super) fn head(conn: &Connection) -> rusqlite::Result<Option<Head>> {
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
